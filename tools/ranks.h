#pragma once

namespace lt::tools {

// Joins the world mpirun started (lt::distributed::init; alone, a world of one) and says
// whether this process is rank 0, the one that prints and writes files. The other ranks'
// standard output goes to /dev/null (their errors still reach stderr). `command` names the
// command in an error.
bool join_world_as_writer(const char* command);

}  // namespace lt::tools
