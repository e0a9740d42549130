# stoker_build_flags: warnings and sanitizers for stoker's own targets. It is an INTERFACE
# target that is linked PRIVATE everywhere and never exported, so consumers of the installed
# package inherit none of these flags.
add_library(stoker_build_flags INTERFACE)
target_compile_options(stoker_build_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
  -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough)
if(STOKER_WERROR)
  target_compile_options(stoker_build_flags INTERFACE -Werror)
endif()
if(STOKER_SANITIZE)
  target_compile_options(stoker_build_flags INTERFACE
    -fsanitize=${STOKER_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(stoker_build_flags INTERFACE -fsanitize=${STOKER_SANITIZE})
  # STOKER_ASSERT (src/os/assert.hpp) checks the engine's invariants in this build too.
  target_compile_definitions(stoker_build_flags INTERFACE STOKER_ASSERTIONS=1)
endif()
