// The C++ runtime functions that the module calls and that the oldest
// libstdc++ the wheel's tag promises (GCC 8's) does not define, compiled into
// the module itself. packaging/zig-c++ adds this file to the wheel's link
// only: a build with the machine's own compiler runs against the machine's
// own libstdc++, which has them. GCC's builds for old systems do the same
// with libstdc++_nonshared.a, and torch's libraries carry such copies too.
// Ours are never exported (module-exports.map keeps every definition of the
// module local), so they replace neither torch's nor the system's copies for
// anyone else.
//
// Which functions: the headers declare them as defined in the shared library,
// so every call would go there, and GCC 8's library lacks them. Torch's
// stable-ABI headers build their error messages with std::stringstream and
// std::ostringstream, calling their default constructors and, in C++20, the
// str() overloads for lvalues and rvalues; the allocators throw through
// __throw_bad_array_new_length when an element count overflows. Each
// definition below is the headers' own code, instantiated here. These classes
// have one layout in every libstdc++ of the C++11 string ABI, and the
// instantiations use the shared library's virtual tables, so an object made
// by one copy and used or destroyed by the other agrees with it.
#include <new>
#include <sstream>
#include <string>

namespace std {
void __throw_bad_array_new_length() { throw bad_array_new_length(); }
}  // namespace std

template std::basic_ostringstream<char>::basic_ostringstream();
template std::basic_stringstream<char>::basic_stringstream();
// The ref-qualified overloads exist in C++20 and later only.
#if __cplusplus > 201703L
template std::string std::basic_stringbuf<char>::str() const&;
template std::string std::basic_stringbuf<char>::str() &&;
template std::string std::basic_ostringstream<char>::str() const&;
template std::string std::basic_ostringstream<char>::str() &&;
template std::string std::basic_stringstream<char>::str() const&;
template std::string std::basic_stringstream<char>::str() &&;
#endif
