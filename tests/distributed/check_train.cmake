# `mpirun -np 2 lazytensor train` trains data-parallel: rank 0 writes the JSON (world_size 2,
# a finite loss each step, the held-out loss falling on the tiny model), and both ranks end
# cleanly. Arguments: -DMPIEXEC=mpirun -DCLI=<lazytensor> -DWORK_DIR=<scratch folder>.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe --mca btl self,vader
          --mca btl_vader_single_copy_mechanism none -np 2
          ${CLI} train --model tiny --steps 6 --batch 4 --seq 32 --lr 2e-3 --eval-every 6
          --quiet --json ${WORK_DIR}/run.json
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "mpirun -np 2 lazytensor train failed (${result}):\n${out}\n${err}")
endif()
file(READ ${WORK_DIR}/run.json run)
string(JSON world GET "${run}" world_size)
string(JSON steps LENGTH "${run}" losses)
string(JSON evaluations LENGTH "${run}" heldout)
if(NOT world EQUAL 2 OR NOT steps EQUAL 6 OR NOT evaluations EQUAL 2)
  message(FATAL_ERROR "world_size ${world}, ${steps} losses, ${evaluations} evaluations:\n${run}")
endif()
math(EXPR last_step "${steps} - 1")
foreach(k RANGE ${last_step})
  string(JSON kind TYPE "${run}" losses ${k})
  if(NOT kind STREQUAL "NUMBER")
    message(FATAL_ERROR "loss ${k} is not a number (${kind}): a NaN or infinity is written as null")
  endif()
endforeach()
string(JSON first GET "${run}" heldout 0 1)
string(JSON last GET "${run}" heldout 1 1)
if(NOT last LESS first)
  message(FATAL_ERROR "the held-out loss did not fall: ${first} -> ${last}")
endif()
string(REGEX MATCHALL "ranks \\(data parallel\\)" announced "${out}")
list(LENGTH announced lines)
if(NOT lines EQUAL 1)
  message(FATAL_ERROR "expected rank 0 alone to print the run's header, got ${lines}:\n${out}")
endif()
