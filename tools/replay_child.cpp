// Fresh-process replays for sweep and ab (see replay_child.h).
#include "tools/replay_child.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/knobs.h"
#include "io/check.h"

namespace strata::tools {
namespace fs = std::filesystem;

std::map<std::string, std::string> parse_knob_list(const std::string& text, const char* what) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == word.size())
      fail(ErrorKind::kBadValue, "{}: '{}' is not KNOB=VALUE", what, word);
    const std::string name = word.substr(0, eq);
    if (!engine::find_knob(name))
      fail(ErrorKind::kBadValue, "{}: unknown knob '{}' (see `strata knobs`)", what, name);
    if (name == "PROF" || name == "PROF_JSON")
      fail(ErrorKind::kBadValue, "{}: {} is set by this command", what, name);
    out[name] = word.substr(eq + 1);
  }
  return out;
}

nlohmann::json run_replay_child(const ReplayChild& c) {
  const std::string json_path = (fs::path(c.work_dir) / (c.tag + ".prof.json")).string();
  const std::string log_path = (fs::path(c.work_dir) / (c.tag + ".log")).string();
  std::vector<std::string> args = {"strata", "replay",   "-m", c.model,       "--tokens",
                                   c.tokens, "--ubatch", "1",  "--prof-json", json_path};
  for (const auto& [name, value] : c.knobs) {
    args.push_back(engine::knob_flag(name));
    args.push_back(value);
  }
  if (!c.dump_logits.empty()) {
    args.push_back("--dump-logits");
    args.push_back(c.dump_logits);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) fail(ErrorKind::kIo, "fork: {}", std::strerror(errno));
  if (pid == 0) {
    // The child: stdout/stderr to the log; PROF off (PROF_JSON alone turns counting on).
    FILE* log = std::fopen(log_path.c_str(), "w");
    if (log) {
      dup2(fileno(log), STDOUT_FILENO);
      dup2(fileno(log), STDERR_FILENO);
    }
    setenv("PROF", "0", 1);
    // Recording knobs in the parent's environment are the parent's: every child writing the same
    // file would race (an arm that wants them passes them as flags, which the child still gets).
    unsetenv("ROUTE_TRACE");
    unsetenv("USAGE_SAVE");
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail(ErrorKind::kIo, "waitpid: {}", std::strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream in(log_path);
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    std::string cmd;
    for (size_t i = 1; i < args.size(); ++i) cmd += " " + args[i];
    fail(ErrorKind::kIo, "replay child failed ({}): strata{}: {}",
         WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status)) : "killed by a signal",
         cmd, last);
  }
  std::ifstream in(json_path);
  if (!in) fail(ErrorKind::kIo, "{}: the replay child wrote no PROF JSON", json_path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kBadValue, "{}: bad PROF JSON: {}", json_path, e.what());
  }
}

ReplayPoint replay_point(const nlohmann::json& prof) {
  ReplayPoint p;
  p.tokens = prof.value("prefill_tokens", uint64_t{0}) + prof.value("decode_tokens", uint64_t{0});
  // replay is teacher-forced: all its tokens count as prefill, at ubatch 1 one at a time.
  p.tok_s = prof.value("decode_tokens", uint64_t{0}) > 0 ? prof.value("decode_tok_s", 0.0)
                                                         : prof.value("prefill_tok_s", 0.0);
  if (prof.contains("hit_rates")) p.hit_rate = prof["hit_rates"].value("fast", 0.0);
  p.ssd_gb_per_token = prof.value("ssd_gb_per_token", 0.0);
  if (prof.contains("verdict")) p.verdict = prof["verdict"].value("bound", std::string());
  return p;
}

TempDir::TempDir(const std::string& stem) {
  std::string tmpl = (fs::temp_directory_path() / (stem + ".XXXXXX")).string();
  if (!mkdtemp(tmpl.data()))
    fail(ErrorKind::kIo, "{}: cannot create a temp directory: {}", tmpl, std::strerror(errno));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace strata::tools
