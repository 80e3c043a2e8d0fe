#include "tessera/testing/process.h"

#include <cstdio>

namespace tessera::testing {

Process::Process(const std::string& binary, const std::vector<std::string>& args, const std::string& log_path)
    : log_path_(log_path) {
  auto child = ChildProcess::spawn({.binary = binary,
                                    .args = args,
                                    .stdout_to = ChildOutput::pipe(),
                                    .stderr_to = log_path.empty() ? ChildOutput::inherit() : ChildOutput::file(log_path)});
  if (!child.ok()) {
    std::fprintf(stderr, "Process: %s\n", child.error().to_string().c_str());
    return;
  }
  child_ = std::move(child).value();
}

Process::~Process() {
  if (child_.running()) (void)terminate();
}

std::string Process::wait_line(const std::string& prefix, std::chrono::milliseconds timeout) {
  return child_.read_line(prefix, timeout);
}

bool Process::alive() { return child_.running(); }

void Process::signal(int sig) { (void)child_.signal(sig); }

int Process::wait_exit(std::chrono::milliseconds timeout) {
  auto st = child_.wait_for(timeout);
  return st ? st->shell_code() : -1;
}

int Process::terminate(std::chrono::milliseconds grace) {
  bool killed = false;
  const ExitStatus st = child_.terminate(grace, &killed);
  return killed ? -1 : st.shell_code();
}

std::string line_field(const std::string& line, const std::string& field) {
  const std::string key = field + "=";
  size_t p = line.find(key);
  if (p == std::string::npos) return "";
  p += key.size();
  const size_t e = line.find(' ', p);
  return line.substr(p, e == std::string::npos ? std::string::npos : e - p);
}

}  // namespace tessera::testing
