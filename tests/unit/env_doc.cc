// Prints the SPCCL_* parameter table that docs/ENV.md embeds between its
// BEGIN/END SPCCL PARAMS markers (the unit test EnvDocMatchesTable compares them).
#include <cstdio>

#include "src/params.h"

int main() {
  const std::string table = spccl::renderParamTable();
  std::fwrite(table.data(), 1, table.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
