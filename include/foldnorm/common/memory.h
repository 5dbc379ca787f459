// Resident memory of this process, step by step (Linux /proc): what the fold's memory table in
// docs/performance.md and its regression test measure; and what memory is left (the bench's
// checks before it loads another copy of a model). A step's peak is the kernel's high-water
// mark (VmHWM) since the step began: writing 5 to /proc/self/clear_refs resets it to the current
// resident size, so each step's figure is its own, not the process's maximum so far.
#pragma once

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace foldnorm {

namespace memory_detail {
/// A "Key:  123 kB" line of a /proc file, in bytes; -1 where there is none.
inline int64_t kilobyteField(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream fields(line.substr(key.size() + 1));
      int64_t kb = -1;
      fields >> kb;
      return kb < 0 ? -1 : kb * 1024;
    }
  return -1;
}
inline int64_t statusBytes(const std::string& key) { return kilobyteField("/proc/self/status", key); }
}  // namespace memory_detail

inline int64_t residentBytes() { return memory_detail::statusBytes("VmRSS"); }

/// What the kernel says could be allocated without swapping (MemAvailable of /proc/meminfo), in
/// bytes; -1 where it does not say.
inline int64_t availableMemoryBytes() { return memory_detail::kilobyteField("/proc/meminfo", "MemAvailable"); }
inline int64_t peakResidentBytes() { return memory_detail::statusBytes("VmHWM"); }

/// Resets the high-water mark to the current resident size; false where the kernel does not
/// allow it (then peaks are the process's maximum so far: upper bounds).
inline bool resetPeakResident() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

/// Hands the heap's freed but kept pages back to the system (glibc keeps what a large run freed,
/// e.g. the activations of a forward, mapped): called between the big steps of an import and a
/// fold, so one step's garbage does not sit under the next step's peak.
inline void releaseFreedHeap() { ::malloc_trim(0); }

/// Peak and resident size of each step of a pipeline. begin(name) ends the running step.
class StepMemory {
 public:
  struct Step {
    std::string name;
    int64_t peak = 0;   // highest resident size during the step (bytes)
    int64_t after = 0;  // resident size when it ended, after freed heap went back to the system
    double seconds = 0;
  };

  StepMemory() : exactPeaks_(resetPeakResident()), baseline_(residentBytes()) {}

  void begin(const std::string& name) {
    if (running_ && current_.name == name) return;  // the same step, said again (one per input set)
    end();
    running_ = true;
    current_ = Step{name};
    exactPeaks_ = resetPeakResident() && exactPeaks_;
    start_ = std::chrono::steady_clock::now();
  }

  void end() {
    if (!running_) return;
    running_ = false;
    current_.peak = peakResidentBytes();
    // What the heap still holds but no longer uses is not the step's: hand it back first.
    releaseFreedHeap();
    current_.after = residentBytes();
    current_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    steps_.push_back(current_);
  }

  const std::vector<Step>& steps() const { return steps_; }
  int64_t baseline() const { return baseline_; }  // resident size before the first step
  bool exactPeaks() const { return exactPeaks_; }
  int64_t worstPeak() const {
    int64_t worst = 0;
    for (const auto& s : steps_) worst = std::max(worst, s.peak);
    return worst;
  }

 private:
  bool exactPeaks_;
  int64_t baseline_;
  bool running_ = false;
  Step current_;
  std::vector<Step> steps_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace foldnorm
