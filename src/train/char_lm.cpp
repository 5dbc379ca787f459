#include "foldnorm/train/char_lm.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "foldnorm/common/error.h"

namespace foldnorm::train {

CharCorpus CharCorpus::load(const std::string& path, double valFraction, int64_t window) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("corpus: cannot read '" + path +
                "'; install the Debian package 'fortunes' (scripts/setup.sh does) or pass "
                "another text file");
  }
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  if (valFraction <= 0.0 || valFraction >= 1.0) {
    throw Error("corpus: the validation fraction must be in (0, 1), got " +
                std::to_string(valFraction));
  }
  const auto total = static_cast<int64_t>(bytes.size());
  const auto valSize = static_cast<int64_t>(static_cast<double>(total) * valFraction);
  if (valSize <= window + 1 || total - valSize <= window + 1) {
    throw Error("corpus: '" + path + "' has " + std::to_string(total) + " bytes, too few for " +
                "windows of " + std::to_string(window) + " tokens in both splits; use a longer text");
  }
  CharCorpus corpus;
  corpus.path = path;
  std::array<int64_t, 256> idOf{};
  idOf.fill(-1);
  for (unsigned char b : bytes) idOf[b] = 0;
  for (int b = 0; b < 256; ++b) {
    if (idOf[b] == 0) {
      idOf[b] = static_cast<int64_t>(corpus.alphabet.size());
      corpus.alphabet.push_back(static_cast<unsigned char>(b));
    }
  }
  auto ids = torch::empty({total}, torch::kInt64);
  auto* out = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < total; ++i) out[i] = idOf[bytes[static_cast<size_t>(i)]];
  corpus.train = ids.slice(0, 0, total - valSize).clone();
  corpus.validation = ids.slice(0, total - valSize).clone();
  return corpus;
}

std::pair<torch::Tensor, torch::Tensor> windowsAt(const torch::Tensor& ids,
                                                  const torch::Tensor& starts, int64_t window) {
  auto offsets = torch::arange(window + 1, torch::kInt64);
  auto rows = ids.index({starts.unsqueeze(1) + offsets.unsqueeze(0)});  // [n, window + 1]
  return {rows.slice(1, 0, window), rows.slice(1, 1, window + 1)};
}

double evaluateLoss(TinyGpt& model, const torch::Tensor& ids, int64_t window, int64_t windows,
                    int64_t batch) {
  const bool wasTraining = model->is_training();
  model->eval();
  torch::NoGradGuard noGrad;
  const int64_t last = ids.numel() - window - 1;
  auto starts = torch::linspace(0, static_cast<double>(last), windows, torch::kFloat64)
                    .round()
                    .to(torch::kInt64);
  double sum = 0.0;
  for (int64_t begin = 0; begin < windows; begin += batch) {
    auto chunk = starts.slice(0, begin, std::min(windows, begin + batch));
    auto [inputs, targets] = windowsAt(ids, chunk, window);
    sum += model->loss(inputs, targets).item<double>() * static_cast<double>(chunk.numel());
  }
  model->train(wasTraining);
  return sum / static_cast<double>(windows);
}

LossCurve trainCharLm(TinyGpt& model, const CharCorpus& corpus, const TrainOptions& options,
                      const std::function<void(int, double)>& progress) {
  if (options.window > model->config().context) {
    throw Error("train: window " + std::to_string(options.window) + " exceeds the model context " +
                std::to_string(model->config().context));
  }
  if (options.steps <= 0 || options.batch <= 0 || options.evalEvery <= 0 ||
      options.evalWindows <= 0) {
    throw Error("train: steps, batch, eval interval and eval windows must be positive");
  }
  auto dataGenerator = at::make_generator<at::CPUGeneratorImpl>(options.dataSeed);
  torch::manual_seed(options.dropoutSeed);
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(options.learningRate));
  const int64_t lastStart = corpus.train.numel() - options.window - 1;

  LossCurve curve;
  auto evaluate = [&](int step) {
    curve.evalSteps.push_back(step);
    curve.validation.push_back(evaluateLoss(model, corpus.validation, options.window,
                                            options.evalWindows, options.batch));
  };
  model->train();
  for (int step = 0; step < options.steps; ++step) {
    if (step % options.evalEvery == 0) evaluate(step);
    auto starts = torch::randint(lastStart + 1, {options.batch}, dataGenerator, torch::kInt64);
    auto [inputs, targets] = windowsAt(corpus.train, starts, options.window);
    optimizer.zero_grad();
    auto loss = model->loss(inputs, targets);
    loss.backward();
    optimizer.step();
    curve.train.push_back(loss.item<double>());
    if (progress) progress(step, curve.train.back());
  }
  evaluate(options.steps);
  return curve;
}

}  // namespace foldnorm::train
