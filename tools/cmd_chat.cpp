// `strata chat -m MODEL [-s SYSTEM] [-p PROMPT] [-n N] [--chat-template NAME] [sampling flags]
// [knob flags]`: multi-turn chat with the model's chat template over an engine::ChatSession (KV
// reused across turns), streamed replies, /commands, Ctrl-C stops a reply, Ctrl-D exits; `-p` is
// one-shot for scripts. Reads stdin with poll/read, so a pipe works as well as a terminal.
// USAGE_SAVE and ROUTE_TRACE are written at exit (Ctrl-D, /exit, Ctrl-C twice at the prompt,
// SIGTERM or SIGHUP); /save-usage [FILE] writes the usage stats at once. Exercised by
// tests/test_chat_cli.cpp and tests/test_route_trace.cpp.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "engine/chat_template.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/prof.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/tokenizer.h"
#include "io/check.h"
#include "kernels/threadpool.h"
#include "placement/plan.h"
#include "tools/cli.h"
#include "tools/json_flags.h"
#include "tools/knob_flags.h"
#include "tools/progress.h"
#include "tools/tier_setup.h"

namespace strata::tools {
namespace {

constexpr uint32_t kDefaultCtx = 4096;  // tokens; the KV cache is F32, so not the training length

struct ChatOptions {
  std::string model;
  std::string system;
  std::optional<std::string> prompt;  // set: one-shot
  std::string chat_template;          // "" = from the model
  int32_t n_predict = -1;             // per reply; < 0: until end of generation or a full context
  uint32_t ubatch = 512;
  std::optional<uint32_t> ctx;
  engine::SamplerParams sampling;
  int64_t seed = -1;  // -1: random
  JsonFlags json;
  KnobOverrides knobs;
};

// SIGINT state. While a reply runs the first Ctrl-C raises g_stop_reply and a second one exits at
// once (a long prefill cannot otherwise be left); at the prompt each Ctrl-C writes a byte to a
// self-pipe that the line reader polls with stdin, so no Ctrl-C is lost between the two states.
// SIGTERM and SIGHUP (the terminal closed) do the same and also raise g_quit: chat leaves after
// the reply stops, or at once from the prompt, through its normal exit (files saved).
std::atomic<bool> g_generating{false};
std::atomic<bool> g_stop_reply{false};
std::atomic<bool> g_quit{false};
std::atomic<int> g_sigint_pipe_w{-1};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

extern "C" void on_sigint(int sig) {
  if (sig != SIGINT) g_quit.store(true);
  if (g_generating.load()) {
    if (g_stop_reply.exchange(true)) _exit(130);
    return;
  }
  const int fd = g_sigint_pipe_w.load();
  if (fd >= 0) {
    const int saved = errno;
    [[maybe_unused]] ssize_t n = write(fd, "c", 1);
    errno = saved;
  }
}

// Installs on_sigint for the lifetime of the object and restores the previous handler after.
class SigintGuard {
 public:
  SigintGuard() {
    int fds[2];
    STRATA_CHECK_SYS(pipe2(fds, O_NONBLOCK | O_CLOEXEC), "pipe2", "SIGINT self-pipe");
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    g_sigint_pipe_w.store(write_fd_);
    struct sigaction sa = {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // poll() is never restarted, so the prompt still wakes up
    STRATA_CHECK_SYS(sigaction(SIGINT, &sa, &old_[0]), "sigaction", "SIGINT");
    STRATA_CHECK_SYS(sigaction(SIGTERM, &sa, &old_[1]), "sigaction", "SIGTERM");
    STRATA_CHECK_SYS(sigaction(SIGHUP, &sa, &old_[2]), "sigaction", "SIGHUP");
  }
  ~SigintGuard() {
    sigaction(SIGINT, &old_[0], nullptr);
    sigaction(SIGTERM, &old_[1], nullptr);
    sigaction(SIGHUP, &old_[2], nullptr);
    g_sigint_pipe_w.store(-1);
    close(read_fd_);
    close(write_fd_);
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;
  int read_fd() const { return read_fd_; }

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  struct sigaction old_[3] = {};
};

// Lines from stdin (terminal or pipe): poll on stdin and the SIGINT pipe, read what is there.
class LineReader {
 public:
  enum class Status { kLine, kEof, kInterrupted };
  explicit LineReader(int sigint_fd) : sigint_fd_(sigint_fd) {}

  Status next(std::string& line) {
    for (;;) {
      if (const size_t nl = buf_.find('\n'); nl != std::string::npos) {
        line.assign(buf_, 0, nl);
        buf_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return Status::kLine;
      }
      if (eof_) {
        if (buf_.empty()) return Status::kEof;
        line = std::move(buf_);  // a last line without '\n'
        buf_.clear();
        return Status::kLine;
      }
      pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {sigint_fd_, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        fail(ErrorKind::kIo, "poll(stdin): {}", std::strerror(errno));
      }
      if (fds[1].revents & POLLIN) {
        char drain[64];
        while (read(sigint_fd_, drain, sizeof drain) > 0) {
        }
        return Status::kInterrupted;
      }
      if (fds[0].revents == 0) continue;
      char chunk[4096];
      const ssize_t n = read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        fail(ErrorKind::kIo, "read(stdin): {}", std::strerror(errno));
      }
      if (n == 0) eof_ = true;
      buf_.append(chunk, size_t(n));
    }
  }

 private:
  int sigint_fd_;
  std::string buf_;
  bool eof_ = false;
};

void print_piece(std::string_view piece) {
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
}

// Prints a reply's pieces, a thinking model's reasoning apart from its answer (THINK): dimmed
// on a terminal, framed by <think> tags elsewhere, or (hide) not at all, with a line on stderr
// saying how many tokens came before the answer.
class ReplyPrinter {
 public:
  explicit ReplyPrinter(bool show_reasoning)
      : show_(show_reasoning), tty_(isatty(STDOUT_FILENO) == 1) {}
  // The turn has begun (its reply's format is known).
  void begin(const engine::ChatSession& s) { split_ = s.reply_splitter(); }
  void piece(std::string_view p) {
    if (!split_) return print_piece(p);
    if (!split_->answering()) ++before_answer_;
    reasoning_.clear();
    answer_.clear();
    split_->feed(p, reasoning_, answer_);
    out();
  }
  // The reply ended (or was cut): whatever was held back, and the reasoning's frame closed.
  void end() {
    if (split_) {
      reasoning_.clear();
      answer_.clear();
      split_->finish(reasoning_, answer_);
      out();
      close_reasoning();
    }
  }

 private:
  void out() {
    if (!reasoning_.empty()) {
      if (!in_reasoning_) {
        in_reasoning_ = true;
        if (show_)
          print_piece(tty_ ? "\x1b[2m" : "<think>\n");
        else if (tty_)
          fmt::print(stderr, "[thinking...]");
      }
      if (show_) print_piece(reasoning_);
    }
    if (!answer_.empty()) {
      close_reasoning();
      print_piece(answer_);
    }
  }
  void close_reasoning() {
    if (!in_reasoning_) return;
    in_reasoning_ = false;
    if (show_) {
      print_piece(tty_ ? "\x1b[0m\n\n" : "\n</think>\n\n");
    } else {
      fmt::print(stderr, "{}[thought for {} tokens]\n", tty_ ? "\r" : "", before_answer_);
    }
  }

  bool show_;
  bool tty_;
  std::optional<engine::ReasoningSplitter> split_;
  std::string reasoning_, answer_;
  bool in_reasoning_ = false;
  uint32_t before_answer_ = 0;  // reply tokens before the answer began
};

// Runs one reply with Ctrl-C armed; prints the reply's end and what stopped it. With PROF on, the
// turn is one profiling window: each decoded token's latency is the time between two streamed
// pieces (decode of the previous token + sampling), and the report follows the reply. With
// PROF_PROBE_EVERY, the probe's passes run after the first piece and after every that many
// decoded tokens, outside both the token latencies and the turn's decode time.
engine::TurnResult reply(engine::ChatSession& s, std::string_view text, int32_t n_predict,
                         bool show_reasoning, engine::Profiler* prof = nullptr) {
  using Clock = std::chrono::steady_clock;
  const bool profiling = prof && prof->enabled();
  if (profiling) prof->begin_window();
  bool have_last = false;
  Clock::time_point last{};
  ReplyPrinter printer(show_reasoning);
  bool begun = false;
  const engine::PieceFn on_piece = [&](std::string_view piece) {
    if (!begun) {
      printer.begin(s);
      begun = true;
    }
    if (profiling) {
      const Clock::time_point now = Clock::now();
      if (have_last) {
        const double dt = std::chrono::duration<double>(now - last).count();
        prof->add_decode_token(dt, s.n_past(), s.lookup().ran(), s.lookup().drafted());
        if (prof->level() >= 2)
          fmt::print(stderr, "\n{}\n", prof->token_line(prof->counters().decode_tokens, dt));
      }
      last = prof->probe_tick() > 0 ? Clock::now() : now;
      have_last = true;
    }
    printer.piece(piece);
  };
  g_stop_reply.store(false);
  g_generating.store(true);
  engine::TurnResult r;
  try {
    r = s.send(text, n_predict, on_piece, &g_stop_reply);
  } catch (...) {
    g_generating.store(false);
    printer.end();
    throw;
  }
  g_generating.store(false);
  printer.end();
  if (profiling) {
    r.stats.decode_s -= prof->counters().probe_seconds;  // this turn's passes (begin_window)
    prof->add_prefill(r.stats.n_prefilled, r.stats.prefill_s);
    prof->counters().sampling_seconds += r.stats.sample_s;
  }
  switch (r.status) {
    case engine::TurnStatus::kEndOfGeneration:
      print_piece("\n");
      break;
    case engine::TurnStatus::kMaxTokens:
      print_piece("\n");
      fmt::print(stderr, "[reply cut at -n {} tokens]\n", n_predict);
      break;
    case engine::TurnStatus::kInterrupted:
      print_piece("\n");
      fmt::print(stderr, "[interrupted]\n");
      break;
    case engine::TurnStatus::kContextFull:
      print_piece("\n");
      fmt::print(stderr,
                 "chat: the context is full ({} of {} tokens); /reset starts a new conversation "
                 "(or restart with a larger --ctx)\n",
                 s.n_past(), s.n_ctx());
      break;
    case engine::TurnStatus::kPromptTooLong:
      fmt::print(stderr,
                 "chat: the context is full: with this message the conversation is {} tokens, the "
                 "context holds {}; /reset starts a new conversation (or restart with a larger "
                 "--ctx)\n",
                 r.stats.n_prompt, s.n_ctx());
      break;
  }
  if (profiling && prof->level() >= 1) std::fputs(prof->report().c_str(), stderr);
  return r;
}

// "chat: experts placed: 40 in RAM (21.0 MB), 24 on SSD (12.6 MB) through a RAM cache of 8 slots
// (4.2 MB), 0 in VRAM; RAM budget 25.0 MB; by ..." — said once, after the first reply. When some
// experts are off RAM it says what chose the homes: PIN, the learned profile, or no usage yet.
std::string placement_line(const engine::Model& model, const engine::ExpertSource& experts,
                           const engine::Knobs& knobs, const UsageRecorder* usage) {
  const placement::PlacementPlan* p = experts.plan();
  if (!p) return "chat: experts placed: none to place (a dense model, or the reference path)";
  std::string by;
  if (p->count(placement::HomeKind::kRam) < p->sizes().total_experts()) {
    if (const std::string pin = pin_path(model, knobs); !pin.empty())
      by = fmt::format("; by the usage in {}", pin);
    else if (usage && usage->learned_tokens() > 0)
      by = fmt::format("; by this model's usage in earlier runs ({} tokens)",
                       usage->learned_tokens());
    else
      by = knobs.get_int("USAGE_AUTO") > 0
               ? "; usage-free (USAGE_AUTO is learning this model's usage)"
               : "; usage-free";
  }
  return fmt::format(
      "chat: experts placed: {} in RAM ({}), {} on SSD ({}) through a RAM cache of {} slots ({}), "
      "{} in VRAM; RAM budget {}{}",
      p->count(placement::HomeKind::kRam),
      placement::format_bytes(p->bytes(placement::HomeKind::kRam)),
      p->count(placement::HomeKind::kSsd),
      placement::format_bytes(p->bytes(placement::HomeKind::kSsd)), p->cache_slots(),
      placement::format_bytes(p->cache_bytes()), p->count(placement::HomeKind::kVram),
      placement::format_bytes(p->budgets().ram_bytes), by);
}

void print_stats(const engine::ChatSession& s) {
  const engine::TurnStats& st = s.last_stats();
  fmt::print(stderr, "context: {} of {} tokens used, {} messages\n", s.n_past(), s.n_ctx(),
             s.messages().size());
  if (st.n_prompt == 0) {
    fmt::print(stderr, "last reply: none yet\n");
    return;
  }
  fmt::print(stderr,
             "last reply: {} tokens, {:.1f} tok/s | prompt {} tokens ({} reused from the cache, {} "
             "prefilled at {:.1f} tok/s)\n",
             st.n_generated, st.decode_tok_s(), st.n_prompt, st.n_reused, st.n_prefilled,
             st.prefill_tok_s());
  if (s.lookup().params().max_draft > 0)
    fmt::print(stderr, "LOOKUP={}, this session: {}\n", s.lookup().params().max_draft,
               engine::describe(s.lookup().counters()));
}

constexpr std::string_view kHelp =
    "commands:\n"
    "  /help        this list\n"
    "  /reset       forget the conversation (the system prompt stays) and empty the KV cache\n"
    "  /stats       tokens in the context, speed of the last reply\n"
    "  /save-usage [FILE]  write the expert usage statistics so far (default: the USAGE_SAVE "
    "file)\n"
    "  /think [on|hide|off]  a thinking model's reasoning: shown, hidden, or asked for none "
    "(THINK)\n"
    "  /exit        leave (so does Ctrl-D, or Ctrl-C twice at the prompt)\n"
    "Ctrl-C stops the current reply. End a line with \\ to continue the message on the next "
    "line; start it with // to send a message that begins with /.\n";

// Returns false when the command asks to leave.
// /save-usage [FILE]: the counts so far to FILE, else to the USAGE_SAVE path.
void save_usage(const UsageRecorder* usage, std::string_view line) {
  std::string_view arg = line.substr(std::string_view("/save-usage").size());
  while (!arg.empty() && (arg.front() == ' ' || arg.front() == '\t')) arg.remove_prefix(1);
  while (!arg.empty() && (arg.back() == ' ' || arg.back() == '\t')) arg.remove_suffix(1);
  const std::string path = !arg.empty() ? std::string(arg) : usage ? usage->path() : std::string();
  if (!usage || path.empty()) {
    fmt::print(stderr,
               "/save-usage: give a file (/save-usage FILE) or start chat with USAGE_SAVE=FILE\n");
    return;
  }
  try {
    usage->save(path);
  } catch (const std::exception& e) {
    fmt::print(stderr, "/save-usage: {}\n", e.what());
  }
}

// /think [on|hide|off]: THINK for the next turns (no argument: says what it is).
void set_think(engine::ChatSession& s, std::string_view line, bool& show_reasoning,
               bool& thinking) {
  std::string_view arg = line.substr(std::string_view("/think").size());
  while (!arg.empty() && (arg.front() == ' ' || arg.front() == '\t')) arg.remove_prefix(1);
  while (!arg.empty() && (arg.back() == ' ' || arg.back() == '\t')) arg.remove_suffix(1);
  const engine::ReasoningFormat f = s.reasoning_style().format;
  if (f == engine::ReasoningFormat::kNone) {
    fmt::print(stderr, "/think: this model does not think (no <think> tokens, not harmony)\n");
    return;
  }
  if (arg == "on" || arg == "hide" || arg == "off") {
    thinking = arg != "off";
    show_reasoning = arg != "hide";
    s.set_thinking(thinking);
  } else if (!arg.empty()) {
    fmt::print(stderr, "/think {}: on, hide or off\n", arg);
    return;
  }
  fmt::print(stderr, "thinking: {}{}\n",
             !thinking        ? "off"
             : show_reasoning ? "on (the reasoning shown)"
                              : "hide",
             !thinking && !s.can_disable_thinking()
                 ? " (this model's template has no switch: it reasons anyway)"
                 : "");
}

bool run_command(engine::ChatSession& s, std::string_view line, const UsageRecorder* usage,
                 bool& show_reasoning, bool& thinking) {
  const std::string_view cmd = line.substr(0, line.find_first_of(" \t"));
  if (cmd == "/help" || cmd == "/?") {
    fmt::print(stderr, "{}", kHelp);
  } else if (cmd == "/reset") {
    s.reset();
    fmt::print(stderr, "conversation cleared\n");
  } else if (cmd == "/stats") {
    print_stats(s);
  } else if (cmd == "/save-usage") {
    save_usage(usage, line);
  } else if (cmd == "/think") {
    set_think(s, line, show_reasoning, thinking);
  } else if (cmd == "/exit" || cmd == "/quit") {
    return false;
  } else {
    fmt::print(stderr,
               "unknown command {}; /help lists them (// sends a message starting with /)\n", cmd);
  }
  return true;
}

int interactive(engine::ChatSession& s, int32_t n_predict, bool show_reasoning, bool thinking,
                engine::Profiler* prof, const UsageRecorder* usage, std::string placed) {
  SigintGuard sigint;
  LineReader in(sigint.read_fd());
  const bool tty = isatty(STDIN_FILENO) == 1;
  fmt::print(stderr,
             "chat: type a message; /help lists commands, Ctrl-C stops a reply, Ctrl-D "
             "exits\n");
  int prompt_sigints = 0;
  std::string message;
  std::string line;
  for (;;) {
    if (tty) print_piece(message.empty() ? "> " : ". ");
    const LineReader::Status st = in.next(line);
    if (st == LineReader::Status::kEof) {
      if (tty) print_piece("\n");
      if (message.empty()) break;
      line.clear();  // a pending "\"-continued message is sent before leaving
    } else if (st == LineReader::Status::kInterrupted) {
      if (g_quit.load()) {
        fmt::print(stderr, "\nchat: stopping (SIGTERM or SIGHUP)\n");
        break;
      }
      if (++prompt_sigints >= 2) {
        print_piece("\n");
        break;
      }
      message.clear();
      fmt::print(stderr, "\n(Ctrl-C again or Ctrl-D to exit)\n");
      continue;
    }
    prompt_sigints = 0;
    if (st == LineReader::Status::kLine && !line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line;
      message += '\n';
      continue;
    }
    message += line;
    std::string text = std::move(message);
    message.clear();
    if (text.find_first_not_of(" \t\n") == std::string::npos) {
      if (st == LineReader::Status::kEof) break;
      continue;
    }
    if (text.size() >= 2 && text[0] == '/' && text[1] == '/') {
      text.erase(0, 1);
    } else if (text[0] == '/') {
      if (!run_command(s, text, usage, show_reasoning, thinking)) break;
      continue;
    }
    reply(s, text, n_predict, show_reasoning, prof);
    if (!placed.empty()) {  // the first reply says how the experts were placed
      fmt::print(stderr, "{}\n", placed);
      placed.clear();
    }
    if (g_quit.load()) {
      fmt::print(stderr, "chat: stopping (SIGTERM or SIGHUP)\n");
      break;
    }
    if (st == LineReader::Status::kEof) break;
  }
  return 0;
}

int run_chat(ChatOptions o) {
  const engine::Knobs knobs = load_knobs(o.knobs);
  const int threads = static_cast<int>(
      knobs.int_opt("THREADS").value_or(int64_t(kernels::physical_core_cpus().size())));
  probe_every_knob(knobs);  // a bad PROF_PROBE_EVERY fails before the model loads
  const engine::LookupParams lookup = engine::lookup_params(knobs);
  const auto schema = json_schema_of(o.json);  // a bad schema fails before the model loads too
  engine::Model model = engine::Model::load(o.model);
  const engine::ModelConfig& cfg = model.config();
  const engine::Tokenizer tok = engine::Tokenizer::from_gguf(model.file());

  const engine::ChatFamily family =
      engine::chat_family_choice(o.chat_template, tok.vocab().chat_template());

  engine::ForwardOptions fo;
  fo.n_ctx =
      o.ctx.value_or(cfg.n_ctx_train > 0 ? std::min(cfg.n_ctx_train, kDefaultCtx) : kDefaultCtx);
  warn_context_beyond_training(fo.n_ctx, model);
  fo.n_ubatch = o.ubatch;
  fo.n_threads = threads;
  // Usage is always counted (cheap), so /save-usage FILE works without USAGE_SAVE.
  const TierSetup tiers =
      make_tier_setup(model, knobs, fo.n_ctx, /*progress_bar=*/true, /*record_usage=*/true,
                      /*learn=*/true, /*reply_tokens=*/o.n_predict);
  fo.experts = tiers.experts.get();
  fo.kv_type = tiers.kv_type;
  fo.route_trace = tiers.trace.get();
  fo.prof = tiers.prof.get();
  tiers.prof->reserve_decode(fo.n_ctx);
  arm_run_probe(*tiers.prof, knobs, threads);
  if (tiers.prof->enabled()) tiers.prof->set_ceilings(engine::probed_ceilings(knobs));
  engine::Forward fwd(model, fo);
  // A message longer than one prefill chunk (a pasted document) draws a bar on a terminal while
  // it prefills; the bar is cleared before the reply streams (the turn's stats say the rest).
  std::optional<Progress> prefill_bar;
  size_t prefill_done = 0;
  if (::isatty(STDERR_FILENO))
    fwd.set_prefill_progress([&](size_t done, size_t total) {
      if (!prefill_bar || done <= prefill_done) {  // a new prefill (the last one may have thrown)
        if (prefill_bar) prefill_bar->abort();
        prefill_bar.emplace("prefill tokens", total, ProgressUnit::kItems);
      }
      prefill_done = done;
      prefill_bar->update(done);
      if (done == total) {
        prefill_bar->abort();
        prefill_bar.reset();
      }
    });
  const std::string placed = placement_line(model, *tiers.experts, knobs, tiers.usage.get());

  o.sampling.seed = o.seed >= 0 ? uint64_t(o.seed) : std::random_device{}();
  fmt::print(stderr,
             "chat: {}, {} layers, {} experts (top {}), {} threads | context {} tokens, template "
             "{}, seed {}\n",
             cfg.arch_name, cfg.n_layer, cfg.n_expert, cfg.n_expert_used, threads, fwd.n_ctx(),
             engine::chat_family_name(family), o.sampling.seed);
  engine::ChatSession session(fwd, tok, family, o.sampling, o.system, lookup);
  session.set_json_schema(schema);
  const std::string think = knobs.get_string("THINK");
  const bool show_reasoning = think != "hide";
  if (const engine::ReasoningFormat f = session.reasoning_style().format;
      f != engine::ReasoningFormat::kNone) {
    fmt::print(stderr,
               "chat: a thinking model ({}): THINK={} (on: its reasoning shown dimmed, hide: "
               "not shown, off: asked not to think)\n",
               engine::reasoning_format_name(f), think);
    session.set_thinking(think != "off");
    session.set_reasoning_budget(int32_t(knobs.int_opt("THINK_BUDGET").value_or(-1)));
    if (think == "off" && !session.can_disable_thinking())
      fmt::print(stderr,
                 "chat: THINK=off: this model's chat template has no switch to turn thinking "
                 "off; it reasons as it will (the reasoning stays out of the conversation)\n");
  }
  // PROMPT_CACHE: the last conversation's KV rows come back; the first turn keeps what it shares
  // with them (a fixed system prompt at least). At exit the conversation's rows are saved.
  const std::string cache_path = knobs.get_string("PROMPT_CACHE");
  const uint32_t cache_flags = engine::prompt_cache_flags(knobs);
  engine::PromptCacheLoad cached;
  if (!cache_path.empty()) {
    const auto t_load = std::chrono::steady_clock::now();
    cached = engine::load_prompt_cache(cache_path, fwd, {}, fwd.n_ctx() - 1, cache_flags);
    session.adopt_kv(cached.tokens);
    print_prompt_cache_load(
        "chat", cache_path, cached, 0,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count());
  }
  const auto save_cache = [&] {
    if (cache_path.empty() || session.kv_tokens().empty()) return;
    const std::span<const int32_t> kept = session.kv_tokens();
    if (std::equal(kept.begin(), kept.end(), cached.file_tokens.begin(), cached.file_tokens.end()))
      return;  // the file holds this already
    const uint64_t bytes = engine::save_prompt_cache(cache_path, fwd, kept, cache_flags);
    fmt::print(stderr, "chat: prompt cache {}: saved {} tokens ({:.1f} MiB)\n", cache_path,
               kept.size(), double(bytes) / (1 << 20));
  };

  if (!o.prompt) {
    const int rc = interactive(session, o.n_predict, show_reasoning, think != "off",
                               tiers.prof.get(), tiers.usage.get(), placed);
    tiers.prof->write_json();  // PROF_JSON: the last turn's window
    save_cache();
    return rc;
  }

  SigintGuard sigint;  // Ctrl-C ends the one-shot reply early; the text so far is printed
  const engine::TurnResult r =
      reply(session, *o.prompt, o.n_predict, show_reasoning, tiers.prof.get());
  if (!placed.empty()) fmt::print(stderr, "{}\n", placed);
  if (r.status == engine::TurnStatus::kPromptTooLong)
    fail(ErrorKind::kBadValue, "the prompt is {} tokens formatted; the context holds {} (--ctx)",
         r.stats.n_prompt, session.n_ctx());
  fmt::print(stderr,
             "chat: prefill {} tokens in {:.3f} s ({:.1f} tok/s) | decode {} tokens in {:.3f} s "
             "({:.1f} tok/s) | {}\n",
             r.stats.n_prefilled, r.stats.prefill_s, r.stats.prefill_tok_s(), r.stats.n_generated,
             r.stats.decode_s, r.stats.decode_tok_s(), engine::turn_status_name(r.status));
  if (lookup.max_draft > 0)
    fmt::print(stderr, "chat: LOOKUP={}: {}\n", lookup.max_draft,
               engine::describe(session.lookup().counters()));
  tiers.prof->write_json();  // PROF_JSON: the last turn's window
  save_cache();
  return 0;
}

}  // namespace

void add_chat(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand("chat", "Chat with a model (interactive, or one-shot with -p)");
  auto o = std::make_shared<ChatOptions>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-s,--system", o->system, "System prompt");
  cmd->add_option("-p,--prompt", o->prompt, "One-shot: reply to this message, print it and exit");
  cmd->add_option("-n,--n-predict", o->n_predict,
                  "Most tokens per reply; < 0 is until end of generation (default -1)");
  cmd->add_option(
      "--chat-template", o->chat_template,
      "Built-in chat format instead of the model's template: " + engine::chat_family_names());
  add_sampling_flags(cmd, o->sampling);
  add_json_flags(cmd, o->json);
  cmd->add_option("--seed", o->seed, "Sampling seed (default: random, printed on stderr)");
  cmd->add_option("--ubatch", o->ubatch, "Prefill chunk size in tokens (default 512)");
  cmd->add_option(
      "--ctx", o->ctx,
      "KV cache size in tokens; 0 is the model's training context (default: that, at most 4096)");
  add_knob_flags(cmd, o->knobs);
  cmd->callback([&run, o] { run = [o] { return run_chat(*o); }; });
}

}  // namespace strata::tools
