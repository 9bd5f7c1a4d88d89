// ScopedTempDir: a fresh directory under the system temp dir, removed with everything in it
// when the object is destroyed.
#ifndef LINSERVE_TESTS_TESTING_SCOPED_TEMP_DIR_H_
#define LINSERVE_TESTS_TESTING_SCOPED_TEMP_DIR_H_

#include <string>

namespace linserve {

class ScopedTempDir {
 public:
  // Aborts with a message when the directory cannot be created: tests cannot go on without it.
  ScopedTempDir();
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string Join(const std::string& name) const;

 private:
  std::string path_;
};

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_SCOPED_TEMP_DIR_H_
