#include "foldnorm/render/render.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "foldnorm/common/error.h"
#include "foldnorm/common/write_file.h"
#include "graphviz.h"

namespace fs = std::filesystem;

namespace foldnorm::render {

const char* toString(ImageFormat format) {
  switch (format) {
    case ImageFormat::Svg: return "svg";
    case ImageFormat::Png: return "png";
    case ImageFormat::Pdf: return "pdf";
    case ImageFormat::Dot: return "dot";
  }
  return "?";
}

ImageFormat formatFromPath(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".svg") return ImageFormat::Svg;
  if (ext == ".png") return ImageFormat::Png;
  if (ext == ".pdf") return ImageFormat::Pdf;
  if (ext == ".dot" || ext == ".gv") return ImageFormat::Dot;
  throw Error("cannot tell the image format of '" + path + "' from its extension" +
              (ext.empty() ? std::string(" (it has none)") : " ('" + ext + "')") +
              ": use .svg, .png, .pdf or .dot (.gv)");
}

std::string toDot(const Scene& scene) {
  std::lock_guard<std::mutex> lock(detail::graphvizLock());
  detail::GvGraph gv(scene, scene.legend);
  return gv.dot();
}

std::string renderToBytes(const Scene& scene, ImageFormat format) {
  std::lock_guard<std::mutex> lock(detail::graphvizLock());
  detail::GvGraph gv(scene, scene.legend);
  switch (format) {
    case ImageFormat::Dot: return gv.dot();
    case ImageFormat::Svg: return gv.render("svg");
    case ImageFormat::Pdf: return gv.render("pdf");
    case ImageFormat::Png:
      // 96 dpi: crisp at 100% zoom on a normal screen, and a third smaller than 144.
      agsafeset(gv.graph(), const_cast<char*>("dpi"), const_cast<char*>("96"), const_cast<char*>(""));
      return gv.render("png");
  }
  throw Error("unknown image format");
}

std::size_t renderToFile(const Scene& scene, const std::string& path, const WriteOptions& options) {
  for (const auto& p : options.protectedPaths)
    if (samePath(path, p))
      throw Error("refusing to overwrite '" + path + "': it is the input model; choose another output path");
  if (fs::is_directory(path)) throw Error("'" + path + "' is a folder; give a file name such as graph.svg");
  ImageFormat format = formatFromPath(path);
  std::string bytes = renderToBytes(scene, format);
  writeFileAtomically(path, bytes);
  return bytes.size();
}

}  // namespace foldnorm::render
