// The host tests' assertion: prints the failed condition with a printf-style message and exits 1.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK(cond, ...)                                                   \
    do                                                                     \
    {                                                                      \
        if(!(cond))                                                        \
        {                                                                  \
            std::fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                             \
            std::fprintf(stderr, "\n");                                    \
            std::exit(1);                                                  \
        }                                                                  \
    } while(0)
