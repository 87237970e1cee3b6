// The knob table: parsing, validation errors that name the knob, precedence env < flag, and the
// generated Markdown.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/knobs.h"
#include "io/check.h"

using namespace strata;
using namespace strata::engine;

namespace {
std::string error_of(const std::map<std::string, std::string>& v) {
  try {
    Knobs::from_values(v);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadValue);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}
}  // namespace

TEST(Knobs, DefaultsAndAuto) {
  const Knobs k = Knobs::from_values({});
  EXPECT_FALSE(k.int_opt("THREADS").has_value());
  EXPECT_FALSE(k.is_set("THREADS"));
  const Knobs t = Knobs::from_values({{"THREADS", "3"}});
  EXPECT_EQ(t.get_int("THREADS"), 3);
  EXPECT_TRUE(t.is_set("THREADS"));
  EXPECT_FALSE(Knobs::from_values({{"THREADS", "auto"}}).int_opt("THREADS").has_value());
}

TEST(Knobs, BadValuesNameTheKnobAndRange) {
  auto e = error_of({{"THREADS", "-2"}});
  EXPECT_NE(e.find("THREADS"), std::string::npos);
  EXPECT_NE(e.find("--threads"), std::string::npos);
  EXPECT_NE(e.find("1..1024"), std::string::npos);
  EXPECT_NE(error_of({{"THREADS", "two"}}).find("not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"THREADS", "3x"}}).find("not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"NO_SUCH_KNOB", "1"}}).find("unknown knob"), std::string::npos);
  // GiB budgets stop at 1 PiB (the byte count would overflow past it).
  for (const char* k : {"RAM_GB", "CACHE_GB"}) {
    EXPECT_NE(error_of({{k, "1e99"}}).find("0..1048576"), std::string::npos) << k;
    EXPECT_NO_THROW(Knobs::from_values({{k, "1048576"}})) << k;
  }
}

TEST(Knobs, EnvThenFlag) {
  setenv("THREADS", "5", 1);
  setenv("STRATA_NOT_A_KNOB", "1", 1);
  const Knobs env = Knobs::load();
  EXPECT_EQ(env.get_int("THREADS"), 5);
  bool warned = false;
  for (const auto& w : env.warnings()) warned |= w.find("STRATA_NOT_A_KNOB") != std::string::npos;
  EXPECT_TRUE(warned);
  EXPECT_EQ(Knobs::load({{"THREADS", "7"}}).get_int("THREADS"), 7);
  setenv("THREADS", "zero", 1);
  EXPECT_THROW(Knobs::load(), Error);
  unsetenv("THREADS");
  unsetenv("STRATA_NOT_A_KNOB");
}

TEST(Knobs, MarkdownListsEveryKnob) {
  const std::string md = knobs_markdown();
  for (const auto& k : knob_table()) {
    EXPECT_NE(md.find(std::string(k.name)), std::string::npos) << k.name;
    EXPECT_NE(md.find(knob_flag(k.name)), std::string::npos) << k.name;
  }
  EXPECT_EQ(knob_flag("RAM_GB"), "--ram-gb");
}

TEST(Knobs, CacheDir) {
  EXPECT_EQ(cache_dir(Knobs::from_values({{"CACHE_DIR", "/x/y"}})), "/x/y");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(cache_dir(Knobs::from_values({})), "/xdg/strata");
  unsetenv("XDG_CACHE_HOME");
}
