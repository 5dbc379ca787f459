#include "worker.h"

#include "app.h"
#include "foldnorm/common/error.h"

namespace foldnorm::gui {

Worker::Worker(std::string name, std::function<void()> wake)
    : name_(std::move(name)), wake_(std::move(wake)), thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    tasks_.clear();
  }
  wakeWorker_.notify_all();
  thread_.join();
}

void Worker::submit(std::string title, Task task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.emplace_back(std::move(title), std::move(task));
  }
  wakeWorker_.notify_one();
}

void Worker::drain(App& app) {
  std::vector<Completion> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done.swap(finished_);
  }
  for (auto& completion : done) completion(app);
}

Worker::Status Worker::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Status s;
  s.busy = running_;
  s.title = title_;
  s.message = message_;
  s.queued = tasks_.size();
  if (running_) {
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }
  return s;
}

bool Worker::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !running_ && tasks_.empty() && finished_.empty();
}

void Worker::loop() {
  for (;;) {
    std::pair<std::string, Task> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wakeWorker_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      job = std::move(tasks_.front());
      tasks_.pop_front();
      running_ = true;
      title_ = job.first;
      message_.clear();
      started_ = std::chrono::steady_clock::now();
    }
    Progress progress = [this](const std::string& message) {
      std::lock_guard<std::mutex> lock(mutex_);
      message_ = message;
    };
    Completion completion;
    try {
      completion = job.second(progress);
    } catch (const std::exception& e) {
      // Torch's errors carry a C++ backtrace, or the interpreter's frames before their cause.
      std::string what = job.first + ": " + errorCause(e.what());
      completion = [what](App& app) { app.ui.errorMessage = what; };
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (completion) finished_.push_back(std::move(completion));
      running_ = false;
      title_.clear();
      message_.clear();
    }
    if (wake_) wake_();
  }
}

}  // namespace foldnorm::gui
