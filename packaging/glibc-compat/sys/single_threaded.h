/* libstdc++'s headers (GCC 11 on) read glibc's __libc_single_threaded when
   this header exists, to skip atomic reference counting in a single-threaded
   process. glibc 2.28, the oldest the wheel runs on, has no such variable (it
   came with 2.32), and zig's copy of the header refuses to be included for an
   older glibc. This one, found first, answers "may be multi-threaded" at
   compile time, so reference counts are always atomic: what libstdc++ does on
   a glibc without the header. */
#ifndef CUSTOM_OP_GLIBC_COMPAT_SINGLE_THREADED_H
#define CUSTOM_OP_GLIBC_COMPAT_SINGLE_THREADED_H
static const char __libc_single_threaded = 0;
#endif
