# Encodes TEXT with the gpt2 binary and with the independent JS encoder, and fails unless the
# ids are identical. -DGPT2=exe -DNODE=node -DJS=encoder.js -DVOCAB=dir -DTEXT=file -DWORK=dir
file(MAKE_DIRECTORY "${WORK}")
get_filename_component(name "${TEXT}" NAME)
set(ours "${WORK}/${name}.keel.json")
set(theirs "${WORK}/${name}.js.json")
execute_process(COMMAND "${GPT2}" tokenize --vocab "${VOCAB}" INPUT_FILE "${TEXT}"
                OUTPUT_FILE "${ours}" RESULT_VARIABLE rc1)
execute_process(COMMAND "${NODE}" "${JS}" "${VOCAB}" "${TEXT}" "${theirs}" RESULT_VARIABLE rc2)
if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "encoders failed: gpt2 ${rc1}, node ${rc2}")
endif()
file(READ "${ours}" a)
file(READ "${theirs}" b)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "ids differ for ${TEXT}: compare ${ours} and ${theirs}")
endif()
string(LENGTH "${a}" n)
message("identical ids (${n} bytes of JSON)")
