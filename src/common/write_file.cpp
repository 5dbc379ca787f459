#include "foldnorm/common/write_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "foldnorm/common/error.h"

namespace fs = std::filesystem;

namespace foldnorm {

bool samePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    bool same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

void checkOutputFile(const std::string& targetName, const std::vector<std::string>& protectedPaths) {
  const fs::path target(targetName);
  for (const auto& p : protectedPaths)
    if (samePath(targetName, p))
      throw Error("refusing to overwrite '" + targetName + "': it is the input model; choose another output path");
  std::error_code ec;
  if (fs::is_directory(target, ec)) throw Error("cannot write '" + targetName + "': it is a folder; give a file name");
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw Error("cannot write '" + targetName + "': folder '" + dir.string() + "' does not exist");
}

void writeFileAtomically(const std::string& targetName, const std::string& bytes,
                         const std::vector<std::string>& protectedPaths) {
  checkOutputFile(targetName, protectedPaths);
  const fs::path target(targetName);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string pattern = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  int fd = mkstemp(name.data());
  if (fd < 0) throw Error("cannot create a temporary file in '" + dir.string() + "': " + std::strerror(errno));
  std::string temp(name.data());
  auto fail = [&](const std::string& what) {
    int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    throw Error("cannot write '" + targetName + "': " + what + ": " + std::strerror(err));
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
  // mkstemp creates 0600; the file is as readable as any file the user makes.
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  if (::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    throw Error("cannot write '" + targetName + "': close failed: " + std::strerror(errno));
  }
  if (std::rename(temp.c_str(), target.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    throw Error("cannot write '" + targetName + "': " + std::strerror(err));
  }
}

namespace {
// The process id `name` ends with after `prefix`, or -1 when the rest is not all digits.
long processIdAfter(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(digits);
}

bool processRuns(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }

// POSIX calls only: libtorch exports its own std::filesystem::remove_all, which crashes in our binaries.
void removeFolderOfFiles(const std::string& path) {
  if (DIR* d = ::opendir(path.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink((path + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(path.c_str());
}
}  // namespace

void removeStaleTemporaries(const std::string& folder, const std::string& prefix) {
  const std::string dir = folder.empty() ? "." : folder;
  std::vector<std::string> stale;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const long pid = processIdAfter(e->d_name, prefix);
      if (pid > 0 && !processRuns(pid)) stale.push_back(dir + "/" + e->d_name);
    }
    ::closedir(d);
  }
  for (const auto& path : stale) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) removeFolderOfFiles(path);
    else if (S_ISREG(st.st_mode)) ::unlink(path.c_str());
  }
}

}  // namespace foldnorm
