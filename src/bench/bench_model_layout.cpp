// Where a bench puts a model's parameters (issue 16 part 2). A load places every parameter at
// whatever page offset the allocator hands out (two loads of one file: all 74 large OPT-125m
// weights at other offsets in their 4 KiB pages), and where a forward's weights lie can move its
// time by a percent or two. One load is one draw of that layout, fixed for the whole run, so a
// bench that loads each model once can read a difference of layouts as the fold's. Moving every
// storage to a fresh allocation at a drawn offset, several times per length, spreads the rounds
// over layouts instead; the interval then resamples the layouts as well as the rounds. With huge
// pages (useHugePages) the offset is the page start, as LibTorch aligns then: a layout is then a
// fresh set of allocations, as another load would give.
// Also whether the bench has the room for what needs a model's bytes again (the null fold's third
// copy, the layouts' moves): nullControlRefusal, layoutsRefusal.
#include "bench_model_internal.h"

#include "foldnorm/common/measure.h"

#include <ATen/ATen.h>
#include <torch/script.h>

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace foldnorm::bench::detail {

namespace {

constexpr int64_t kPage = 4096;
// LibTorch's CPU allocator aligns every allocation to 64 bytes, or to the page with huge pages on
// (THP_MEM_ALLOC_ENABLE): a drawn offset is one a load could have given.
constexpr int64_t kAlignment = 64;

}  // namespace

void relocateParameters(torch::jit::Module& module, std::mt19937_64& rng) {
  // One new allocation per old storage: tensors that shared a storage (tied weights) still do.
  std::map<const c10::StorageImpl*, at::Tensor> moved;
  const int64_t alignment = hugePagesInUse() ? kPage : kAlignment;
  std::uniform_int_distribution<int64_t> step(0, kPage / alignment - 1);
  for (auto sub : module.modules()) {
    for (const auto& attribute : sub.named_attributes(/*recurse=*/false)) {
      if (!attribute.value.isTensor()) continue;
      const auto t = attribute.value.toTensor();
      if (!t.defined() || !t.has_storage() || t.is_quantized() || t.storage().nbytes() == 0) continue;
      const auto& storage = t.storage();
      auto it = moved.find(storage.unsafeGetStorageImpl());
      if (it == moved.end()) {
        const auto bytes = static_cast<int64_t>(storage.nbytes());
        const auto byteOptions = t.options().dtype(at::kByte);
        auto raw = at::empty({bytes + kPage}, byteOptions);
        const auto base = static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(raw.data_ptr()) % kPage);
        // The drawn offset in its page, aligned as any allocation of LibTorch's would be.
        const auto skip = ((step(rng) * alignment - base) % kPage + kPage) % kPage;
        auto fresh = raw.narrow(0, skip, bytes);
        const auto old = at::from_blob(const_cast<void*>(storage.data()), {bytes}, byteOptions);
        fresh.copy_(old);
        // Bytes, not values: NaN payloads and signed zeros count too. A wrong copy would time
        // another model, so refuse rather than bench it.
        if (!at::equal(fresh, old)) throw std::logic_error("relocateParameters: a storage changed when copied");
        it = moved.emplace(storage.unsafeGetStorageImpl(), fresh).first;
      }
      // The same elements, sizes and strides, in the new bytes.
      const auto typed = it->second.view(t.scalar_type());
      auto relocated = typed.as_strided(t.sizes(), t.strides(), typed.storage_offset() + t.storage_offset());
      const auto* expected = static_cast<const char*>(it->second.const_data_ptr()) + t.storage_offset() * t.element_size();
      if (relocated.const_data_ptr() != expected || relocated.sizes() != t.sizes() || relocated.strides() != t.strides())
        throw std::logic_error("relocateParameters: attribute " + attribute.name + " lost its place in its storage");
      sub.setattr(attribute.name, relocated);
    }
  }
}

}  // namespace foldnorm::bench::detail

namespace foldnorm::bench {

namespace {
// Empty where `bytes` fit in `available` with a quarter to spare (or nothing is known).
bool fits(int64_t bytes, int64_t available) { return available < 0 || bytes + bytes / 4 <= available; }
}  // namespace

std::string nullControlRefusal(int64_t modelBytes, int64_t availableBytes) {
  if (fits(modelBytes, availableBytes)) return "";
  return format("a third copy of the model (%.2f GB) would not fit in the %.2f GB available beside the two timed, "
                "so the rounds time those two only",
                static_cast<double>(modelBytes) / 1e9, static_cast<double>(availableBytes) / 1e9);
}

std::string layoutsRefusal(int64_t modelsBytes, int64_t availableBytes) {
  if (fits(modelsBytes, availableBytes)) return "";
  // Each storage moves to a new allocation a page longer than the old one, which the heap kept for
  // timing (keepLargeBuffersOnHeap) cannot reuse: a move can take as much again as the models.
  return format("moving the timed models' %.2f GB of parameters to new page offsets could take as much again, and "
                "%.2f GB are available, so each keeps where its load put it (1 layout)",
                static_cast<double>(modelsBytes) / 1e9, static_cast<double>(availableBytes) / 1e9);
}

}  // namespace foldnorm::bench
