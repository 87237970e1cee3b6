// `strata replay -m MODEL (--tokens FILE | --text FILE [--chunk N] [--chunks N]) [--score-from N]
// [--kl-base DIR] [--dump-logits DIR] [--dump-routing DIR] [-t N] [--ubatch N] [--ctx N]`: every
// line of FILE is one stream of whitespace-separated token ids (or, --text, the file tokenized
// and cut into llama-perplexity's chunks), decoded teacher-forced into an empty KV cache as one
// prefill (chunks of --ubatch), like the fixtures' references; the logits / routing of every
// position go to DIR/stream{N}.logits.bin / .routing.bin (MOEL / MOER), and the streams'
// perplexity is printed (engine/perplexity.h), with --kl-base the KL divergence from an earlier
// run's dumps. Tested end to end by tests/test_model_replay.cpp.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "engine/logit_dump.h"
#include "engine/model.h"
#include "engine/perplexity.h"
#include "engine/tokenizer.h"
#include "io/check.h"
#include "kernels/threadpool.h"
#include "tools/cli.h"
#include "tools/knob_flags.h"
#include "tools/tier_setup.h"

namespace strata::tools {
namespace {

namespace fs = std::filesystem;

struct ReplayOptions {
  std::string model;
  std::string tokens;
  std::string text;                    // --text: a text file, cut into perplexity chunks
  uint32_t chunk = 512;                // --text: tokens per chunk (llama-perplexity's -c)
  uint32_t max_chunks = 0;             // --text: at most this many chunks (0: all)
  std::optional<uint32_t> score_from;  // first position scored (default: --text chunk / 2, else 0)
  std::string kl_base;  // a DIR of an earlier replay's --dump-logits: KL divergence from it
  std::string dump_logits;
  std::string dump_routing;
  uint32_t ubatch = 512;
  uint32_t ctx = 0;
  KnobOverrides knobs;
};

// Streams of token ids, one per non-blank line; a bad id is an error naming line and column.
// An input file that exists and is a regular file (a directory opens, then fails to read).
void check_input_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(ErrorKind::kNotFound, "{}: cannot open {}", path, what);
  if (!fs::is_regular_file(path, ec)) fail(ErrorKind::kBadValue, "{}: not a regular file", path);
}

std::vector<std::vector<int32_t>> read_streams(const std::string& path, uint32_t n_vocab) {
  check_input_file(path, "token file");
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kNotFound, "{}: cannot open token file", path);
  std::vector<std::vector<int32_t>> streams;
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < line.size()) {
      if (std::isspace(static_cast<unsigned char>(line[i]))) {
        ++i;
        continue;
      }
      size_t end = i;
      while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
      const std::string_view word(line.data() + i, end - i);
      int64_t id = 0;
      const auto r = std::from_chars(word.data(), word.data() + word.size(), id);
      if (r.ec != std::errc() || r.ptr != word.data() + word.size())
        fail(ErrorKind::kBadValue, "{}:{}:{}: '{}' is not a token id", path, line_no, i + 1, word);
      if (id < 0 || id >= int64_t{n_vocab})
        fail(ErrorKind::kBadValue, "{}:{}:{}: token id {} is out of range (n_vocab {})", path,
             line_no, i + 1, id, n_vocab);
      ids.push_back(static_cast<int32_t>(id));
      i = end;
    }
    if (!ids.empty()) streams.push_back(std::move(ids));
  }
  if (in.bad()) fail(ErrorKind::kIo, "{}: read error", path);
  if (streams.empty()) fail(ErrorKind::kBadValue, "{}: no token streams", path);
  return streams;
}

void make_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(ErrorKind::kIo, "{}: cannot create directory: {}", dir, ec.message());
}

int run_replay(const ReplayOptions& o) {
  const engine::Knobs knobs = load_knobs(o.knobs);
  const int threads = static_cast<int>(
      knobs.int_opt("THREADS").value_or(int64_t(kernels::physical_core_cpus().size())));
  engine::Model model = engine::Model::load(o.model);
  const engine::ModelConfig& cfg = model.config();
  std::vector<std::vector<int32_t>> streams;
  if (!o.text.empty()) {
    if (o.chunk < 2) fail(ErrorKind::kBadValue, "--chunk {}: at least 2 tokens", o.chunk);
    check_input_file(o.text, "text file");
    std::ifstream in(o.text, std::ios::binary);
    if (!in) fail(ErrorKind::kNotFound, "{}: cannot open text file", o.text);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) fail(ErrorKind::kIo, "{}: read error", o.text);
    // As llama-perplexity: the whole text tokenized with the vocabulary's BOS (control strings
    // left as text), chunks of --chunk tokens each starting with BOS.
    const engine::Tokenizer tok = engine::Tokenizer::from_gguf(model.file());
    const std::vector<int32_t> ids = tok.tokenize(text, true, false);
    const int32_t bos = tok.vocab().add_bos() ? tok.vocab().bos() : -1;
    streams = engine::perplexity_chunks(ids, o.chunk, bos, o.max_chunks);
    if (streams.empty())
      fail(ErrorKind::kBadValue, "{}: {} tokens, fewer than one chunk of {} (--chunk)", o.text,
           ids.size(), o.chunk);
    std::fprintf(stderr, "replay: %s: %zu tokens, %zu chunks of %u\n", o.text.c_str(), ids.size(),
                 streams.size(), o.chunk);
  } else {
    streams = read_streams(o.tokens, cfg.n_vocab);
  }
  const size_t score_from = o.score_from.value_or(o.text.empty() ? 0 : o.chunk / 2);
  size_t longest = 0;
  for (const auto& s : streams) longest = std::max(longest, s.size());
  if (o.ctx && longest > o.ctx)
    fail(ErrorKind::kBadValue, "--ctx {} is shorter than the longest stream ({} tokens)", o.ctx,
         longest);
  if (o.ubatch == 0) fail(ErrorKind::kBadValue, "--ubatch must be > 0");
  if (!o.kl_base.empty() && !fs::is_directory(o.kl_base))
    fail(ErrorKind::kNotFound, "--kl-base {}: not a directory (an earlier replay's --dump-logits)",
         o.kl_base);
  if (!o.dump_logits.empty()) make_dir(o.dump_logits);
  if (!o.dump_routing.empty()) make_dir(o.dump_routing);

  engine::ForwardOptions fo;
  fo.n_ctx = o.ctx ? o.ctx : static_cast<uint32_t>(longest);
  warn_context_beyond_training(fo.n_ctx, model);
  fo.n_ubatch = o.ubatch;
  fo.n_threads = threads;
  const TierSetup tiers = make_tier_setup(model, knobs, fo.n_ctx);
  fo.experts = tiers.experts.get();
  fo.kv_type = tiers.kv_type;
  fo.prof = tiers.prof.get();
  fo.route_trace = tiers.trace.get();
  // Ctrl-C: stop after the current chunk; USAGE_SAVE etc. still saved. Installed before the
  // forward pass is set up (REPACK, arenas), so a Ctrl-C during that also ends with the saves.
  const StopSignals sigint;
  engine::Forward fwd(model, fo);

  std::vector<float> logits;
  engine::RoutingTrace trace;
  engine::NllStats nll;
  engine::KlStats kl;
  size_t n_tokens = 0;
  double seconds = 0;
  bool interrupted = false;
  for (size_t s = 0; s < streams.size(); ++s) {  // a Ctrl-C ends it below, naming the stream
    const auto& ids = streams[s];
    fwd.reset();
    logits.resize(ids.size() * cfg.n_vocab);
    trace.reset(cfg.n_layer, cfg.n_expert, cfg.n_expert_used);
    const bool want_routing = !o.dump_routing.empty();
    const auto t0 = std::chrono::steady_clock::now();
    // Chunk by chunk (the same chunks prefill makes) so that Ctrl-C can stop between two.
    size_t done = 0;
    while (done < ids.size() && !sigint.requested()) {
      const size_t n = std::min<size_t>(o.ubatch, ids.size() - done);
      fwd.prefill(std::span(ids).subspan(done, n), logits.data() + done * cfg.n_vocab,
                  want_routing ? &trace : nullptr);
      done += n;
    }
    const double stream_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += stream_s;
    tiers.prof->add_prefill(done, stream_s);
    n_tokens += done;
    if (done < ids.size()) {
      std::fprintf(stderr, "replay: interrupted in stream %zu after %zu of %zu tokens\n", s, done,
                   ids.size());
      interrupted = true;
      break;
    }
    nll.add_stream(ids, logits, cfg.n_vocab, score_from);
    if (!o.kl_base.empty()) {
      const std::string path =
          (fs::path(o.kl_base) / fmt::format("stream{}.logits.bin", s)).string();
      const engine::LogitDump base = engine::read_logit_dump(path);
      if (base.tokens != ids || base.n_vocab != cfg.n_vocab)
        fail(ErrorKind::kBadValue,
             "--kl-base {}: {} tokens x {} logits, not this stream's {} x {} (replay the same "
             "streams)",
             path, base.tokens.size(), base.n_vocab, ids.size(), cfg.n_vocab);
      kl.add_stream(base.logits, logits, ids.size(), cfg.n_vocab, score_from);
    }
    if (streams.size() > 1 && nll.count() > 0)  // progress, and the estimate so far
      std::fprintf(stderr, "replay: stream %zu/%zu: perplexity so far %.4f (%zu predictions)\n",
                   s + 1, streams.size(), nll.ppl(), nll.count());
    if (!o.dump_logits.empty())
      engine::write_logit_dump(
          (fs::path(o.dump_logits) / fmt::format("stream{}.logits.bin", s)).string(), ids, logits,
          cfg.n_vocab);
    if (want_routing)
      engine::write_routing_dump(
          (fs::path(o.dump_routing) / fmt::format("stream{}.routing.bin", s)).string(), trace);
  }
  std::fprintf(stderr,
               "replay: %zu streams, %zu tokens in %.3f s (%.1f tok/s), %d threads, ubatch %u\n",
               streams.size(), n_tokens, seconds, seconds > 0 ? double(n_tokens) / seconds : 0.0,
               threads, o.ubatch);
  if (nll.count() > 0)
    std::fprintf(stderr,
                 "replay: perplexity %.4f +/- %.5f over %zu predictions (mean NLL %.6f; scored "
                 "from position %zu of each stream)\n",
                 nll.ppl(), nll.ppl_error(), nll.count(), nll.mean_nll(), score_from);
  else
    std::fprintf(stderr,
                 "replay: no prediction scored (streams shorter than --score-from %zu + 2)\n",
                 score_from);
  if (kl.count() > 0)
    std::fprintf(stderr,
                 "replay: KL divergence from %s: mean %.6g +/- %.3g, max %.6g; same top token at "
                 "%.2f%% of %zu positions\n",
                 o.kl_base.c_str(), kl.mean(), kl.mean_error(), kl.max(), 100.0 * kl.same_top(),
                 kl.count());
  finish_prof(*tiers.prof);
  return interrupted || sigint.requested() ? sigint.exit_status() : 0;
}

}  // namespace

void add_replay(CLI::App& app, CommandFn& run) {
  auto* cmd = app.add_subcommand(
      "replay",
      "Teacher-forced decode of token streams (or a text's chunks): perplexity, logits / routing "
      "per position");
  auto o = std::make_shared<ReplayOptions>();
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  auto* tokens = cmd->add_option("--tokens", o->tokens,
                                 "Token file: one stream of whitespace-separated ids per line");
  auto* text = cmd->add_option("--text", o->text,
                               "Text file: tokenized and cut into --chunk-token streams, as "
                               "llama-perplexity does (e.g. wiki.test.raw)");
  tokens->excludes(text);
  cmd->add_option("--chunk", o->chunk, "--text: tokens per stream (default 512)");
  cmd->add_option("--chunks", o->max_chunks, "--text: at most this many streams (default all)");
  cmd->add_option("--score-from", o->score_from,
                  "First position whose next-token prediction the perplexity scores (default: "
                  "half the chunk with --text, as llama-perplexity; 0 with --tokens)");
  cmd->add_option("--dump-logits", o->dump_logits, "Write DIR/stream{N}.logits.bin (MOEL)");
  cmd->add_option("--dump-routing", o->dump_routing, "Write DIR/stream{N}.routing.bin (MOER)");
  cmd->add_option("--ubatch", o->ubatch, "Prefill chunk size in tokens (default 512)");
  cmd->add_option("--ctx", o->ctx, "KV cache size (default: the longest stream)");
  cmd->add_option("--kl-base", o->kl_base,
                  "DIR of an earlier replay's --dump-logits (same streams, e.g. another file of "
                  "the model): the KL divergence from its next-token distributions");
  add_knob_flags(cmd, o->knobs);
  cmd->callback([&run, o, tokens, text] {
    if (tokens->count() == 0 && text->count() == 0) throw CLI::RequiredError("--tokens or --text");
    run = [o] { return run_replay(*o); };
  });
}

}  // namespace strata::tools
