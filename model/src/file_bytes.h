// FileBytes: the read-only bytes of one model file, either mmap'ed or copied to the heap.
//
// Ownership: a FileBytes owns its mapping/buffer and releases it in its destructor. It is
// shared (std::shared_ptr) by every Model whose Tensors point into it, so the bytes live as
// long as the last such Model. Immutable after construction; safe to read from many threads.
// The heap copy is 64-byte aligned; an mmap is page aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/common/result.h"

namespace tessera::loaders {

class FileBytes {
 public:
  // Errors: kIoError (cannot open/stat/map/read; names the path and errno text).
  static Result<std::shared_ptr<const FileBytes>> open(const std::string& path, bool use_mmap);
  // Copies `size` bytes (used by fuzz drivers and tests). `name` stands in for the path in errors.
  static std::shared_ptr<const FileBytes> copy_of(const void* data, size_t size, std::string name);

  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool mapped() const { return mapped_; }  // a read-only private file mapping (not a heap copy)

 private:
  FileBytes() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  bool mapped_ = false;
  void* heap_ = nullptr;  // aligned heap copy when !mapped_
};

}  // namespace tessera::loaders
