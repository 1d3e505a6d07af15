# Every document the repository's code and docs cite is in the repository: each name ending in
# ".md" that a source, header, test, tool, benchmark, example or document mentions must be a file
# here (at the root, beside the file that mentions it, or at the path given).
file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/*.md ${SOURCE_DIR}/src/* ${SOURCE_DIR}/include/* ${SOURCE_DIR}/tests/*
     ${SOURCE_DIR}/tools/* ${SOURCE_DIR}/bench/* ${SOURCE_DIR}/examples/* ${SOURCE_DIR}/docs/*
     ${SOURCE_DIR}/cmake/* ${SOURCE_DIR}/Makefile ${SOURCE_DIR}/CMakeLists.txt)
set(missing "")
foreach(file ${files})
  if(file MATCHES "(^|/)(build[^/]*|\\.venv[^/]*|venv|models|out)/" OR NOT file MATCHES "\\.(md|h|cpp|def|in|py|sh|txt|cmake|inc)$|Makefile$")
    continue()
  endif()
  file(STRINGS ${SOURCE_DIR}/${file} lines REGEX "[A-Za-z0-9_-]+\\.md")
  get_filename_component(dir ${SOURCE_DIR}/${file} DIRECTORY)
  foreach(line ${lines})
    string(REGEX MATCHALL "[A-Za-z0-9_./-]*[A-Za-z0-9_-]+\\.md" cited "${line}")
    foreach(name ${cited})
      get_filename_component(base ${name} NAME)
      if(NOT EXISTS ${SOURCE_DIR}/${name} AND NOT EXISTS ${dir}/${name}
         AND NOT EXISTS ${SOURCE_DIR}/${base} AND NOT EXISTS ${SOURCE_DIR}/docs/${base})
        string(APPEND missing "\n  ${file}: ${name}")
      endif()
    endforeach()
  endforeach()
endforeach()
if(missing)
  message(FATAL_ERROR "documents cited but not in the repository:${missing}")
endif()
