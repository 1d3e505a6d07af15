# A rank that fails mid-run ends the job with an error, not a hang: mpirun runs
# Distributed.FailedRankEndsTheJob on 2 ranks, and the last one either kills itself (SIGKILL:
# mpirun ends the others) or stops issuing collectives (sleeps: the waiting rank's timeout,
# LT_DISTRIBUTED_TIMEOUT, ends the job with a message naming the collective). Arguments:
# -DMPIEXEC=mpirun -DTEST=<distributed_test> -DFAILURE=kill|stall.
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env LT_TEST_FAIL_LAST_RANK=${FAILURE} LT_DISTRIBUTED_TIMEOUT=20
          ${MPIEXEC} --allow-run-as-root --oversubscribe --mca btl self,vader
          --mca btl_vader_single_copy_mechanism none -np 2
          ${TEST} --gtest_filter=Distributed.FailedRankEndsTheJob
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 180)
string(TIMESTAMP end "%s")
math(EXPR seconds "${end} - ${start}")
message(STATUS "mpirun ended after ${seconds} s with: ${result}\n${out}\n${err}")
if(result MATCHES "timeout")
  message(FATAL_ERROR "the job hung: still running after 180 s")
endif()
if(result EQUAL 0)
  message(FATAL_ERROR "the job ended successfully although a rank failed")
endif()
foreach(rank 0 1)
  if(NOT out MATCHES "rank ${rank}: first all-reduce done")
    message(FATAL_ERROR "rank ${rank} never completed the first all-reduce: the job failed early")
  endif()
endforeach()
if(seconds GREATER 120)
  message(FATAL_ERROR "the job took ${seconds} s to end after a rank failed")
endif()
if(FAILURE STREQUAL "stall" AND NOT err MATCHES "[a-z_]+\\([a-z0-9 ]+\\) #[0-9]+ of [a-z0-9]+\\[[0-9, ]*\\] did not complete within 20 s")
  message(FATAL_ERROR "the waiting rank did not name the collective it timed out in")
endif()
