// The one way foldnorm writes a text or image file (reports, images, JSON, docs tables): the bytes
// go to a temporary file in the target's folder, fsync'd, then renamed over the target, so a run
// that fails half-way never leaves a half-written file and a reader never sees one.
// (Models are written by LibTorch's own writers to a temporary name and renamed the same way:
// fold.cpp, export_write.cpp.)
#pragma once

#include <string>
#include <vector>

namespace foldnorm {

/// True when `a` and `b` name the same file (or would, once created).
bool samePath(const std::string& a, const std::string& b);

/// The checks writeFileAtomically makes before it writes, for a command to run first (before work
/// that takes minutes): throws Error when the folder does not exist, `target` is a folder or it is
/// one of `protectedPaths`.
void checkOutputFile(const std::string& target, const std::vector<std::string>& protectedPaths = {});

/// Writes `bytes` to `target` atomically. Throws Error (one line) when the folder does not exist,
/// `target` is a folder, it is one of `protectedPaths` (the command's input model), or any write fails.
void writeFileAtomically(const std::string& target, const std::string& bytes,
                         const std::vector<std::string>& protectedPaths = {});

/// Removes what saves killed before their rename left in `folder`: entries named `prefix`
/// followed by the id of a process that no longer runs (fold.cpp's `OUT.tmp-PID` file,
/// export_write.cpp's `.foldnorm-tmp-PID/` folder of files). A running process's temporaries
/// (another save in progress) are never touched; nothing else is. Best effort: never throws.
void removeStaleTemporaries(const std::string& folder, const std::string& prefix);

}  // namespace foldnorm
