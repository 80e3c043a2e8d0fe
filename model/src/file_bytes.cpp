#include "file_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace tessera::loaders {
namespace {

constexpr std::align_val_t kAlign{64};

Error io_error(const std::string& path, const char* what) {
  return make_error(ErrorCode::kIoError, path + ": " + what + ": " + std::strerror(errno));
}

void* aligned_alloc_bytes(size_t size) { return ::operator new(size == 0 ? 1 : size, kAlign); }

}  // namespace

FileBytes::~FileBytes() {
  if (mapped_ && data_ != nullptr && size_ > 0) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  if (heap_ != nullptr) ::operator delete(heap_, kAlign);
}

Result<std::shared_ptr<const FileBytes>> FileBytes::open(const std::string& path, bool use_mmap) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Error e = io_error(path, "cannot stat");
    ::close(fd);
    return e;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::kIoError, path + ": not a regular file");
  }
  std::shared_ptr<FileBytes> fb(new FileBytes());
  fb->path_ = path;
  fb->size_ = static_cast<size_t>(st.st_size);
  if (fb->size_ == 0) {
    ::close(fd);
    static const uint8_t kEmpty = 0;
    fb->data_ = &kEmpty;
    return std::shared_ptr<const FileBytes>(std::move(fb));
  }
  if (use_mmap) {
    void* p = ::mmap(nullptr, fb->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Error e = io_error(path, "cannot mmap");
      ::close(fd);
      return e;
    }
    fb->data_ = static_cast<const uint8_t*>(p);
    fb->mapped_ = true;
  } else {
    fb->heap_ = aligned_alloc_bytes(fb->size_);
    auto* dst = static_cast<uint8_t*>(fb->heap_);
    size_t done = 0;
    while (done < fb->size_) {
      const ssize_t n = ::pread(fd, dst + done, fb->size_ - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        Error e = n < 0 ? io_error(path, "read failed")
                        : make_error(ErrorCode::kIoError, path + ": file shrank while reading");
        ::close(fd);
        return e;
      }
      done += static_cast<size_t>(n);
    }
    fb->data_ = dst;
  }
  ::close(fd);
  return std::shared_ptr<const FileBytes>(std::move(fb));
}

std::shared_ptr<const FileBytes> FileBytes::copy_of(const void* data, size_t size, std::string name) {
  std::shared_ptr<FileBytes> fb(new FileBytes());
  fb->path_ = std::move(name);
  fb->size_ = size;
  fb->heap_ = aligned_alloc_bytes(size);
  if (size > 0) std::memcpy(fb->heap_, data, size);
  fb->data_ = static_cast<const uint8_t*>(fb->heap_);
  return fb;
}

}  // namespace tessera::loaders
