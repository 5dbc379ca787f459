// The precompiled LibTorch header shared by every torch-facing target (see src/CMakeLists.txt).
#pragma once
#include <torch/script.h>
#include <torch/torch.h>
