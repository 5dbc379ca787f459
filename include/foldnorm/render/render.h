// Writing a Scene as an image or a DOT file with the Graphviz C libraries (cgraph + gvc).
//
// The format comes from the file extension: .svg, .png, .pdf (laid out by dot, the legend
// included unless the scene says otherwise), .dot / .gv (the graph with all its attributes,
// not laid out: `dot -Tsvg` reproduces the picture). Files are written atomically (a temporary
// file in the same folder, renamed over the target), so a failed render never leaves half a file.
#pragma once

#include <string>
#include <vector>

#include "foldnorm/render/scene.h"

namespace foldnorm::render {

enum class ImageFormat { Svg, Png, Pdf, Dot };
const char* toString(ImageFormat format);

/// From the extension of `path`; throws foldnorm::Error naming the valid extensions otherwise.
ImageFormat formatFromPath(const std::string& path);

/// The scene as DOT text (what tests read: node ids, colours, clusters, the legend).
std::string toDot(const Scene& scene);

/// The rendered bytes (an SVG document, PNG or PDF data, or DOT text).
std::string renderToBytes(const Scene& scene, ImageFormat format);

struct WriteOptions {
  /// Paths that must never be overwritten (the model the scene came from). Compared by identity
  /// (same file on disk) when both exist, else by normalized path.
  std::vector<std::string> protectedPaths;
};

/// Renders and writes `path` atomically. Returns the number of bytes written.
std::size_t renderToFile(const Scene& scene, const std::string& path, const WriteOptions& options = {});

}  // namespace foldnorm::render
