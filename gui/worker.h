// A background thread for the work a frame must never wait on (importing and analysing a model,
// laying out a module, folding). Tasks run one at a time in submission order; each
// returns a completion that the UI thread applies to the app when it drains the queue, so UI
// state is only ever touched by the UI thread (the Tracy profiler's pattern).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace foldnorm::gui {

struct App;

class Worker {
 public:
  using Completion = std::function<void(App&)>;
  using Progress = std::function<void(const std::string&)>;
  using Task = std::function<Completion(const Progress&)>;

  struct Status {
    bool busy = false;
    std::string title;    // the running task
    std::string message;  // its latest progress message
    double seconds = 0;   // since it started
    std::size_t queued = 0;
  };

  /// `wake` is called from the worker thread after a task ends, so an event-waiting UI loop
  /// redraws at once (glfwPostEmptyEvent).
  explicit Worker(std::string name, std::function<void()> wake = {});
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void submit(std::string title, Task task);
  /// Applies the completions of finished tasks; call from the UI thread only. A task that threw
  /// completes by setting the error line (the message's first line, no stack).
  void drain(App& app);
  Status status() const;
  bool idle() const;  // nothing running, queued, or waiting to be drained

 private:
  void loop();

  std::string name_;
  std::function<void()> wake_;
  mutable std::mutex mutex_;
  std::condition_variable wakeWorker_;
  std::deque<std::pair<std::string, Task>> tasks_;
  std::vector<Completion> finished_;
  bool running_ = false;
  std::string title_;
  std::string message_;
  std::chrono::steady_clock::time_point started_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace foldnorm::gui
