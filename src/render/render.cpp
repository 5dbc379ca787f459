#include "foldnorm/render/render.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "foldnorm/common/error.h"
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

namespace {

bool samePath(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    bool same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

void writeAtomically(const fs::path& target, const std::string& bytes) {
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("cannot write '" + target.string() + "': folder '" + dir.string() + "' does not exist");
  std::string pattern = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  int fd = mkstemp(name.data());
  if (fd < 0)
    throw Error("cannot create a temporary file in '" + dir.string() + "': " + std::strerror(errno));
  std::string temp(name.data());
  auto fail = [&](const std::string& what) {
    int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    throw Error("cannot write '" + target.string() + "': " + what + ": " + std::strerror(err));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  // mkstemp creates 0600; an image is as readable as any file the user makes.
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  if (::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    throw Error("cannot write '" + target.string() + "': close failed: " + std::strerror(errno));
  }
  if (std::rename(temp.c_str(), target.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    throw Error("cannot write '" + target.string() + "': " + std::strerror(err));
  }
}

}  // namespace

std::size_t renderToFile(const Scene& scene, const std::string& path, const WriteOptions& options) {
  for (const auto& p : options.protectedPaths)
    if (samePath(path, p))
      throw Error("refusing to overwrite '" + path + "': it is the input model; choose another output path");
  if (fs::is_directory(path)) throw Error("'" + path + "' is a folder; give a file name such as graph.svg");
  ImageFormat format = formatFromPath(path);
  std::string bytes = renderToBytes(scene, format);
  writeAtomically(path, bytes);
  return bytes.size();
}

}  // namespace foldnorm::render
