# Runs foldnorm-gui headless under xvfb-run (Mesa's software OpenGL) and judges the result.
# cmake -DGUI=... -DCHECK=... -DMODEL=... -DLN=... -DEXPECT=foldable|not-foldable -DOUT=dir
#       [-DFOLDNORM=... -DZOO=gpt2 -DPRESET=tiny]  (build MODEL with the zoo first)
#       -P screenshot_test.cmake
foreach(var GUI CHECK MODEL LN OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "screenshot_test.cmake: -D${var}= is required")
  endif()
endforeach()
file(MAKE_DIRECTORY ${OUT})
if(DEFINED ZOO)
  execute_process(COMMAND ${FOLDNORM} zoo ${ZOO} --preset ${PRESET} -o ${MODEL}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "foldnorm zoo ${ZOO} failed (${rc})")
  endif()
endif()
get_filename_component(name ${MODEL} NAME_WE)
set(png ${OUT}/${name}.png)
set(state ${OUT}/${name}.json)
file(REMOVE ${png} ${state})
find_program(XVFB_RUN xvfb-run REQUIRED)
execute_process(
  COMMAND ${XVFB_RUN} -a -s "-screen 0 1600x1000x24" ${GUI} ${MODEL} --screenshot ${png}
          --select ${LN} --frames 5 --dump-state ${state} --timeout 300
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "foldnorm-gui --screenshot failed (${rc})")
endif()
execute_process(COMMAND ${CHECK} ${png} ${state} ${LN} ${EXPECT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "screenshot checks failed; see ${png} and ${state}")
endif()
