// Path completion for the open dialog: what the typed text's directory holds, and the longest
// completion that all matching entries share (as a shell's Tab does).
#pragma once

#include <string>
#include <vector>

namespace foldnorm::gui {

/// "a/b/c" -> "a/b/", "c" -> "", "/x" -> "/".
std::string directoryPart(const std::string& typed);
std::string basenamePart(const std::string& typed);
std::string joinPath(const std::string& directory, const std::string& entry);
/// Directories (with a trailing '/') and model files (.pt, .pt2), sorted, directories first; hidden entries
/// only when asked for by a leading '.'. On failure returns nothing and sets `error`.
std::vector<std::string> listDirectory(const std::string& directory, std::string* error);
/// The typed path extended by the longest common prefix of the matching entries.
std::string completePath(const std::string& typed, const std::vector<std::string>& entries);

}  // namespace foldnorm::gui
