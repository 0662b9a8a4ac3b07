// The argument checks shared by every op front end.
#include <doctest/doctest.h>

#include "ops/common.h"

using namespace keel;

TEST_CASE("argument checks raise typed errors that name the op and the shapes") {
  Tensor a = zeros({2, 3});
  Tensor b = zeros({2, 3}, {DType::f64});
  try {
    detail::check_same_dtype("myop", {{"a", a}, {"b", b}});
    FAIL("no error");
  } catch (const DTypeError& e) {
    std::string m = e.what();
    CHECK(m.find("myop") != std::string::npos);
    CHECK(m.find("a [2, 3] f32 cpu") != std::string::npos);
    CHECK(m.find("b [2, 3] f64 cpu") != std::string::npos);
  }
  CHECK_THROWS_AS(detail::check_integer("myop", {{"a", a}}), DTypeError);
  CHECK_THROWS_AS(detail::check_dim("myop", {"a", a}, 3), ShapeError);
  CHECK_THROWS_AS(detail::check_defined("myop", {{"u", Tensor()}}), ValueError);
}
