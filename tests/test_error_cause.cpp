// Issue 28 item 3: an error inside the TorchScript interpreter (or the .pt2 interpreter) keeps its
// cause: the op, where the model's code called it, and the final error line; never only the
// interpreter's first line ("The following operation failed in the TorchScript interpreter.").
#include <catch2/catch.hpp>

#include <torch/script.h>

#include "foldnorm/common/error.h"

using namespace foldnorm;

TEST_CASE("an interpreter failure is one line naming the op and the cause", "[errors]") {
  torch::jit::Module m("Indexer");
  m.define("def forward(self, x, i):\n  y = x * 2.0\n  return torch.index_select(y, 0, i)\n");
  std::string what;
  try {
    m.forward({at::ones({3, 2}), at::full({1}, 7, at::kLong)});  // row 7 of 3
    FAIL("index_select of a missing row ran");
  } catch (const std::exception& e) {  // a JITException (std::runtime_error), not a c10::Error
    what = e.what();
  }
  INFO(what);
  REQUIRE(what.find("operation failed in the TorchScript interpreter") != std::string::npos);
  const auto cause = errorCause(what);
  INFO(cause);
  CHECK(cause.find("index_select") != std::string::npos);  // the op the interpreter underlined
  CHECK(cause.find("out of range") != std::string::npos);  // the cause, from the message's end
  CHECK(cause.find('\n') == std::string::npos);
  CHECK(cause.find("The following operation failed") == std::string::npos);
}

TEST_CASE("a traced model's interpreter failure names its Python source line", "[errors]") {
  // The shape LibTorch gives a traced model's failure (frames of the serialized code, then of the
  // original Python code, then the cause): the device mix-up of issue 28, as the H200 printed it.
  const std::string what =
      "The following operation failed in the TorchScript interpreter.\n"
      "Traceback of TorchScript, serialized code (most recent call last):\n"
      "  File \"code/__torch__/transformers/models/gpt2/modeling_gpt2.py\", line 31, in forward\n"
      "    position_ids = torch.unsqueeze(_7, 0)\n"
      "    position_embeds = (wpe).forward(position_ids, )\n"
      "  File \"code/__torch__/torch/nn/modules/sparse.py\", line 10, in forward\n"
      "    weight = self.weight\n"
      "    return torch.embedding(weight, input, -1, False, False)\n"
      "           ~~~~~~~~~~~~~~~ <--- HERE\n"
      "\n"
      "Traceback of TorchScript, original code (most recent call last):\n"
      "/venv/lib/python3.11/site-packages/torch/nn/functional.py(2551): embedding\n"
      "/venv/lib/python3.11/site-packages/transformers/models/gpt2/modeling_gpt2.py(790): forward\n"
      "RuntimeError: Expected all tensors to be on the same device, but got index is on cpu, different "
      "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA__index_select)\n";
  CHECK(errorCause(what) ==
        "torch.embedding at modeling_gpt2.py:790: Expected all tensors to be on the same device, but got index is on "
        "cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA__index_select)");
  // Any other message: its first line, as before.
  CHECK(errorCause("\nshape mismatch\n  at frame 1\n") == "shape mismatch");
}

TEST_CASE("a torch.export node's stack trace gives its source line", "[errors]") {
  CHECK(pythonSourceLine("  File \"/x/modeling_opt.py\", line 120, in forward\n    h = self.fc1(h)\n"
                         "  File \"/venv/torch/nn/modules/linear.py\", line 125, in forward\n"
                         "    return F.linear(input, self.weight, self.bias)\n") == "modeling_opt.py:120");
  CHECK(pythonSourceLine("  File \"/venv/torch/nn/functional.py\", line 9, in linear\n") == "functional.py:9");
  CHECK(pythonSourceLine("").empty());
}

TEST_CASE("a LibTorch error's C++ backtrace never reaches the line shown", "[errors]") {
  std::string what;
  try {
    (void)at::ones({2, 3}).view({4});  // a c10::Error with its backtrace in what()
    FAIL("an impossible view ran");
  } catch (const std::exception& e) {  // as the GUI sees it: no LibTorch types
    what = e.what();
  }
  INFO(what);
  const auto stripped = withoutBacktrace(what);
  CHECK(stripped.find("frame #") == std::string::npos);
  CHECK(stripped.find("Exception raised from") == std::string::npos);
  CHECK(stripped.find("shape '[4]' is invalid") != std::string::npos);
  CHECK(errorCause(what).find("shape '[4]' is invalid for input of size 6") != std::string::npos);
  // An interpreter failure with a backtrace appended: the cause is the message's last line, not a
  // frame of the C++ stack.
  const std::string wrapped =
      "The following operation failed in the TorchScript interpreter.\n"
      "Traceback of TorchScript, serialized code (most recent call last):\n"
      "  File \"code/__torch__/m.py\", line 3, in forward\n"
      "    return torch.index_select(y, 0, i)\n"
      "           ~~~~~~~~~~~~~~~~~~ <--- HERE\n"
      "RuntimeError: index out of range in self\n"
      "Exception raised from index_select_out_cpu_ at /pytorch/aten/src/ATen/native/TensorAdvancedIndexing.cpp:1460 "
      "(most recent call first):\n"
      "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f in libc10.so)\n";
  CHECK(errorCause(wrapped) == "torch.index_select: index out of range in self");
  CHECK(withoutBacktrace("no stack here\n") == "no stack here\n");
}
