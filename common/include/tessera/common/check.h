// Invariant checks: a failed check prints the condition, both operands and a message, then
// aborts. For broken invariants only — never for bad input (that is a Result error).
//
//   TS_CHECK(page < num_pages_) << "page id out of pool";
//   TS_CHECK_EQ(free + held + cached, total);
#pragma once

#include <sstream>
#include <string>

namespace tessera::detail {

// Collects the streamed message and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* expr);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return os_; }

 private:
  std::ostringstream os_;
};

struct Voidify {
  void operator&(std::ostream&) {}
};

template <class A, class B>
std::string format_operands(const A& a, const B& b) {
  std::ostringstream os;
  os << "(" << a << " vs " << b << ") ";
  return os.str();
}

}  // namespace tessera::detail

#define TS_CHECK(cond)                    \
  (cond) ? (void)0                        \
         : ::tessera::detail::Voidify() & \
               ::tessera::detail::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define TS_CHECK_OP_(a, b, op)                                                     \
  ((a)op(b)) ? (void)0                                                             \
             : ::tessera::detail::Voidify() &                                      \
                   ::tessera::detail::CheckFailure(__FILE__, __LINE__, #a " " #op " " #b) \
                           .stream()                                               \
                       << ::tessera::detail::format_operands((a), (b))

#define TS_CHECK_EQ(a, b) TS_CHECK_OP_(a, b, ==)
#define TS_CHECK_NE(a, b) TS_CHECK_OP_(a, b, !=)
#define TS_CHECK_LT(a, b) TS_CHECK_OP_(a, b, <)
#define TS_CHECK_LE(a, b) TS_CHECK_OP_(a, b, <=)
#define TS_CHECK_GT(a, b) TS_CHECK_OP_(a, b, >)
#define TS_CHECK_GE(a, b) TS_CHECK_OP_(a, b, >=)

#ifdef NDEBUG
#define TS_DCHECK(cond) \
  while (false) TS_CHECK(cond)
#else
#define TS_DCHECK(cond) TS_CHECK(cond)
#endif
