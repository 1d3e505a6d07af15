# bench/gemm_replay_benchmark on a timeline of `lazytensor train --model tiny`: every matmul
# launch of a kept step has its library product in the timeline (as many products as launches
# a step), each distinct call is made again alone, and the table and totals are printed with
# times above zero. Arguments: -DCLI=<lazytensor> -DBENCH=<gemm_replay_benchmark>
# -DWORK_DIR=<scratch folder>.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(trace ${WORK_DIR}/tiny.json)
execute_process(
  COMMAND ${CLI} train --model tiny --steps 4 --eval-batches 0 --quiet --trace ${trace}
  OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "lazytensor train failed (${rc}):\n${stdout}\n${stderr}")
endif()
execute_process(COMMAND ${BENCH} ${trace} --skip 1
                OUTPUT_VARIABLE table ERROR_VARIABLE stderr RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gemm_replay_benchmark failed (${rc}):\n${table}\n${stderr}")
endif()
string(REGEX MATCH "The step's ([0-9]+) matmul launches [^;]*; ([0-9]+) library products"
       counts "${table}")
if(NOT counts OR NOT CMAKE_MATCH_1 EQUAL CMAKE_MATCH_2 OR CMAKE_MATCH_1 EQUAL 0)
  message(FATAL_ERROR "launches and library products a step differ (or are none):\n${table}")
endif()
string(REGEX MATCHALL "\n\\| f32->f32 [0-9]+x[0-9]+x[0-9]+[^\n]*" rows "${table}")
list(LENGTH rows count)
if(count LESS 3)
  message(FATAL_ERROR "fewer than 3 distinct products in a tiny training step:\n${table}")
endif()
foreach(row IN LISTS rows)
  # | product | calls | in step | warm | cold | warm / in step | cold / in step |
  if(NOT row MATCHES "\\| [1-9][0-9]* \\| [1-9][0-9]* \\| [1-9][0-9]* \\| [1-9][0-9]* \\| [0-9]+\\.[0-9][0-9] \\| [0-9]+\\.[0-9][0-9] \\|$")
    message(FATAL_ERROR "a row without a count and three times above zero: ${row}\n${table}")
  endif()
endforeach()
