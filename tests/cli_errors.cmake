# The CLI's contract for bad input: a clear message on stderr, a non-zero exit, no crash, no
# half-written output, the input untouched. Run by ctest:
#   cmake -DFOLDNORM=path/to/foldnorm -DOUT=scratch-dir -P tests/cli_errors.cmake
foreach(var FOLDNORM OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "cli_errors.cmake: -D${var}= is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(failures 0)

# expect_from(PROGRAM NAME RC "stderr fragment" args...): exit code RC, stderr containing the
# fragment and no C++ backtrace (LibTorch's "Exception raised from ..." and "frame #N" lines).
function(expect_from program name rc fragment)
  execute_process(COMMAND ${program} ${ARGN} RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT got STREQUAL "${rc}")
    message(SEND_ERROR "${name}: exit code ${got}, expected ${rc}\nstderr: ${err}")
  elseif(NOT err MATCHES "${fragment}")
    message(SEND_ERROR "${name}: stderr lacks '${fragment}'\nstderr: ${err}")
  elseif(err MATCHES "Exception raised from|frame #[0-9]")
    message(SEND_ERROR "${name}: stderr carries a C++ backtrace\nstderr: ${err}")
  else()
    message(STATUS "ok: ${name} (exit ${got})")
  endif()
endfunction()
# expect(NAME RC "stderr fragment" args...): the same for the foldnorm command.
function(expect name rc fragment)
  expect_from(${FOLDNORM} "${name}" ${rc} "${fragment}" ${ARGN})
endfunction()

execute_process(COMMAND ${FOLDNORM} zoo gpt2 --preset tiny -o ${OUT}/gpt2.pt RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "foldnorm zoo gpt2 --preset tiny failed (${rc})")
endif()
file(SHA256 ${OUT}/gpt2.pt before)
file(WRITE ${OUT}/text.pt "hello, not a model\n")

expect("unknown command" 106 "unknown command 'frobnicate'" frobnicate)
expect("missing file" 2 "no such file" analyze ${OUT}/missing.pt)
expect("a directory" 2 "is a directory" inspect ${OUT})
expect("not a zip file" 2 "not a zip file" analyze ${OUT}/text.pt)
expect("a malformed input spec" 2 "input spec|spec" analyze ${OUT}/gpt2.pt --input 2xQ:int64)
expect("an input spec the model cannot run" 2 "input spec" analyze ${OUT}/gpt2.pt --input 2x16:float32)
expect("--only naming no LayerNorm" 2 "--only no.such.ln" analyze ${OUT}/gpt2.pt --only no.such.ln)
expect("fold onto its own input" 2 "refusing to overwrite" fold ${OUT}/gpt2.pt -o ${OUT}/gpt2.pt)
expect("fold onto its input by another name" 2 "refusing to overwrite" fold ${OUT}/gpt2.pt -o ${OUT}/./gpt2.pt)
expect("fold into a missing folder" 2 "does not exist" fold ${OUT}/gpt2.pt -o ${OUT}/no/such/dir/x.pt)
expect("fold a .pt into a .pt2" 2 "TorchScript model folds into a TorchScript file.*ending in .pt" fold ${OUT}/gpt2.pt -o ${OUT}/x.pt2 --no-verify)
if(RENDER)  # builds without Graphviz have no render command
  expect("render to an unknown format" 2 ".jpeg" render ${OUT}/gpt2.pt -o ${OUT}/x.jpeg)
endif()
execute_process(COMMAND ${FOLDNORM} zoo llama --preset tiny -o ${OUT}/llama.pt RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "foldnorm zoo llama --preset tiny failed (${rc})")
endif()
expect("bench where nothing folds" 2 "nothing to compare" bench ${OUT}/llama.pt --reps 2 --warmup 2)
# The core names the setting; the CLI spells it as its flag.
expect("bench with one timed round" 2 "error: --reps: at least 2 timed rounds" bench ${OUT}/gpt2.pt --reps 1)
expect("bench with one warm-up" 2 "error: --warmup: at least 2 warm-up" bench ${OUT}/gpt2.pt --warmup 1)
# --json-out is checked before any timing, and never written over the model.
expect("bench --json-out onto its input" 2 "refusing to overwrite" bench ${OUT}/gpt2.pt --json-out ${OUT}/gpt2.pt)
expect("bench --json-out into a missing folder" 2 "folder .* does not exist" bench ${OUT}/gpt2.pt --json-out ${OUT}/no/such/b.json)
expect("bench with no parameter layout" 105 "--layouts: Value 0 not in range 1 to 64" bench ${OUT}/gpt2.pt --layouts 0)
expect("bench with an unknown page setting" 105 "--huge-pages: maybe not in" bench ${OUT}/gpt2.pt --huge-pages maybe)
# The timing method's defaults and flags reach the report: the null fold's line, huge pages, the
# layouts; and off means off.
execute_process(COMMAND ${FOLDNORM} bench ${OUT}/gpt2.pt --seq 8 --reps 2 --warmup 2 --threads 1 --huge-pages on
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(SEND_ERROR "bench --huge-pages on: exit ${rc}\nstderr: ${err}")
elseif(NOT out MATCHES "null fold \\(original / its second copy" OR NOT out MATCHES "on transparent huge pages"
       OR NOT out MATCHES "over 2 parameter layouts")
  message(SEND_ERROR "bench's report lacks the null fold, huge pages or the layouts:\n${out}")
else()
  message(STATUS "ok: bench with the null fold, huge pages, 2 layouts")
endif()
execute_process(COMMAND ${FOLDNORM} bench ${OUT}/gpt2.pt --seq 8 --reps 2 --warmup 2 --threads 1 --huge-pages off
                        --null-control off --layouts 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR out MATCHES "null fold|huge pages|parameter layouts" OR NOT out MATCHES "4 KiB pages")
  message(SEND_ERROR "bench with the method off: exit ${rc}, report:\n${out}")
else()
  message(STATUS "ok: bench with 4 KiB pages, no null fold, 1 layout")
endif()

# .pt2 inputs that are no readable torch.export archive of torch >= 2.9 (zips made here; a
# truncated real one is tested in tests/test_export_archive.cpp).
file(WRITE ${OUT}/text.pt2 "hello, not a model\n")
expect("a .pt2 that is no zip" 2 "not a torch.export archive .*not a zip file" inspect ${OUT}/text.pt2)
function(zip_folder name)  # zip_folder(NAME file content ...): ${OUT}/NAME.pt2, entries under NAME/
  set(files "")
  while(ARGN)
    list(POP_FRONT ARGN file content)
    file(WRITE ${OUT}/${name}/${file} "${content}")
    list(APPEND files ${name}/${file})
  endwhile()
  file(WRITE ${OUT}/${name}/.data/version "6\n")  # LibTorch's zip reader wants a format version
  list(APPEND files ${name}/.data/version)
  execute_process(COMMAND ${CMAKE_COMMAND} -E tar cf ${name}.pt2 --format=zip ${files} WORKING_DIRECTORY ${OUT})
  file(REMOVE_RECURSE ${OUT}/${name})
endfunction()
zip_folder(plain readme.txt "hello")
expect("a zip without a program" 2 "not a torch.export archive \\(no models/model.json" analyze ${OUT}/plain.pt2)
zip_folder(legacy serialized_exported_program.json "{}" version "8.7")
expect("the pre-2.8 .pt2 layout" 2 "pre-2.8 layout.*re-save it with torch >= 2.9" analyze ${OUT}/legacy.pt2)
set(config "{\"config\": {}}")
zip_folder(newer archive_format "pt2" archive_version "0" byteorder "little"
           models/model.json "{\"graph_module\": {}, \"schema_version\": {\"major\": 9, \"minor\": 0}}"
           data/weights/model_weights_config.json "${config}" data/constants/model_constants_config.json "${config}")
expect("a .pt2 schema major too new" 2 "export schema 9.0.*reads schema major 8" inspect ${OUT}/newer.pt2)
if(RENDER)
  expect("render of a bad .pt2" 2 "not a torch.export archive" render ${OUT}/text.pt2 -o ${OUT}/x.svg)
endif()

# The analyses programs keep the same contract (issue 28: `e2e_speed --device cuda` on a machine
# without a GPU printed LibTorch's backtrace after tracing a 124M-parameter model). The test runs
# with CUDA_VISIBLE_DEVICES empty, so cuda is absent even on a GPU machine.
if(DEFINED ANALYSES_BIN)
  expect_from(${ANALYSES_BIN}/e2e_speed "e2e_speed on cuda without a GPU" 1
              "^e2e_speed: error: timing on cuda needs a CUDA device[^\n]*\n$"
              --device cuda --models gpt2:small --seq 32 --out ${OUT}/e2e.md --data ${OUT}/e2e.dat)
  expect_from(${ANALYSES_BIN}/e2e_speed "e2e_speed with an unknown preset" 1 "unknown preset 'nope' for zoo model 'gpt2'"
              --models gpt2:nope --seq 32 --out ${OUT}/e2e.md --data ${OUT}/e2e.dat)
  expect_from(${ANALYSES_BIN}/kernel_table "kernel_table on cuda without a GPU" 1
              "^kernel_table: error: timing on cuda needs a CUDA device"
              --device cuda --out ${OUT}/k.md --data ${OUT}/k.dat)
  expect_from(${ANALYSES_BIN}/rotation_outliers "rotation_outliers with a bad count" 105 "--sets: Value x"
              --sets x --out ${OUT}/r.md)
  foreach(f e2e.md e2e.dat k.md k.dat r.md)
    if(EXISTS ${OUT}/${f})
      message(SEND_ERROR "an analyses program that failed wrote ${f}")
    endif()
  endforeach()
endif()

file(SHA256 ${OUT}/gpt2.pt after)
if(NOT before STREQUAL after)
  message(SEND_ERROR "the input model changed")
endif()
file(GLOB leftovers ${OUT}/*.tmp* ${OUT}/x.jpeg ${OUT}/x.svg ${OUT}/x.pt2 ${OUT}/no ${OUT}/.*.tmp*)
if(leftovers)
  message(SEND_ERROR "half-written or unexpected outputs left behind: ${leftovers}")
endif()
