// error_of(fn): the message of the strata::Error that fn throws, or "" when it throws none — how
// the tests check one-line errors. Shared by the tier, placement and I/O tests.
#pragma once

#include <functional>
#include <string>

#include "io/check.h"

namespace strata {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace strata
