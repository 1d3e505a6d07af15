# The lazytensor command sets libgomp's spin (GOMP_SPINCOUNT=30000) when the user chose no wait
# for it, and keeps the user's choice otherwise: libgomp's own report (OMP_DISPLAY_ENV) of the
# setting it read, in a run of the command without, with OMP_WAIT_POLICY and with
# GOMP_SPINCOUNT. Arguments: -DCLI=<lazytensor>.
function(spin_count_read out)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env --unset=OMP_WAIT_POLICY --unset=GOMP_SPINCOUNT
            OMP_DISPLAY_ENV=verbose ${ARGN} ${CLI} params --model tiny
    OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "lazytensor params failed (${rc}):\n${stdout}\n${stderr}")
  endif()
  # The last report is the one the command ran with (the first one, before it ran itself
  # again, has libgomp's default).
  string(REGEX MATCHALL "GOMP_SPINCOUNT = '[0-9]+'" reports "${stdout}${stderr}")
  list(LENGTH reports count)
  if(count EQUAL 0)
    message(FATAL_ERROR "libgomp reported no GOMP_SPINCOUNT:\n${stdout}\n${stderr}")
  endif()
  list(GET reports -1 last)
  string(REGEX REPLACE ".*'([0-9]+)'" "\\1" value "${last}")
  set(${out} ${value} PARENT_SCOPE)
endfunction()

spin_count_read(unset)
if(NOT unset STREQUAL "30000")
  message(FATAL_ERROR "with neither variable set, libgomp spins ${unset} turns, not 30000")
endif()
spin_count_read(passive OMP_WAIT_POLICY=PASSIVE)
if(NOT passive STREQUAL "0")
  message(FATAL_ERROR "with OMP_WAIT_POLICY=PASSIVE, libgomp spins ${passive} turns, not 0")
endif()
spin_count_read(chosen GOMP_SPINCOUNT=1234)
if(NOT chosen STREQUAL "1234")
  message(FATAL_ERROR "with GOMP_SPINCOUNT=1234, libgomp spins ${chosen} turns")
endif()
