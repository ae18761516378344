/* TANDEM_API marks the symbols libtandem.so exports. The library is compiled with
 * -fvisibility=hidden, so everything else (the engine's internals) stays private to it and
 * can change without breaking programs linked against the shared library. Plain C so that
 * both tandem.h and the C++ headers can use it. */
#ifndef TANDEM_EXPORT_H
#define TANDEM_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define TANDEM_API __attribute__((visibility("default")))
#else
#define TANDEM_API
#endif

#endif /* TANDEM_EXPORT_H */
