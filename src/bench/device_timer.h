// One sample's time, for both timing harnesses (bench_norm.cpp times kernels, bench_model.cpp
// forwards). CPU: wall clock around the synchronous call. CUDA: events on the device's current
// stream around the call, then a wait for the stop event (the call only enqueues kernels).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>

#include <chrono>
#include <functional>

namespace foldnorm::bench {

class DeviceTimer {
 public:
  explicit DeviceTimer(const c10::Device& device) : device_(device) {}

  /// Milliseconds of one call of `fn`. `beforeStart` (CUDA only: an L2 flush) runs on the stream
  /// before the start event, so it is not timed.
  double timeMs(const std::function<void()>& fn, const std::function<void()>& beforeStart = {}) {
    if (!device_.is_cuda()) {
      const auto start = std::chrono::steady_clock::now();
      fn();
      const auto stop = std::chrono::steady_clock::now();
      return std::chrono::duration<double, std::milli>(stop - start).count();
    }
    if (beforeStart) beforeStart();
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    const c10::Stream stream = impl.getStream(device_);
    c10::Event start(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    c10::Event stop(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    start.record(stream);
    fn();
    stop.record(stream);
    stop.synchronize();
    return start.elapsedTime(stop);
  }

  /// Waits until the device has finished everything queued (after untimed warm-up calls).
  void settle() {
    if (device_.is_cuda()) torch::cuda::synchronize();
  }

  const c10::Device& device() const { return device_; }

 private:
  c10::Device device_;
};

}  // namespace foldnorm::bench
