// A command run in the background by a test (a lock holder, a listener), with its output in a
// file; it is killed and reaped by PID when the object goes, also when the test fails.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/prctl.h>
#include <thread>

namespace coetcd::test {

class child_process {
 public:
  /// Runs `sh -c command` with stdout and stderr going to a temp file.
  explicit child_process(const std::string& command) {
    char path[] = "/tmp/coetcd-child-XXXXXX";
    int fd = ::mkstemp(path);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    output_path_ = path;
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);  // its own group, so stop() reaches what the shell started
      // Never outlive the test binary (sh runs a lone command in place, so this reaches it):
      // a soak killed from outside left its lockcheck workers running.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fd);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() {
    stop();
    std::error_code ec;
    std::filesystem::remove(output_path_, ec);
  }

  int pid() const noexcept { return pid_; }

  void signal(int sig) const {
    if (!status_) ::kill(-pid_, sig);
  }

  /// The exit code (128+N when killed by signal N), or nullopt if still running after `limit`.
  std::optional<int> wait(std::chrono::milliseconds limit) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (!status_) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() >= end) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status_;
  }

  bool running() { return !wait(std::chrono::milliseconds(0)); }

  std::string output() const {
    std::ifstream in(output_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  /// Waits until the output contains `text`; false if it did not within `limit`.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds limit) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (output().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  /// SIGTERM, then SIGKILL after a grace period; always reaps.
  void stop() {
    if (status_ || pid_ <= 0) return;
    ::kill(-pid_, SIGTERM);
    if (!wait(std::chrono::seconds(5))) {
      ::kill(-pid_, SIGKILL);
      wait(std::chrono::seconds(5));
    }
  }

 private:
  int pid_ = -1;
  std::string output_path_;
  std::optional<int> status_;
};

}  // namespace coetcd::test
