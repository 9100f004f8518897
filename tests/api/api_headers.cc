// The same checks as api_headers.c, compiled as C++ (public headers must work
// from both languages; extern "C" comes from the headers themselves).
#include "api_headers.c"
