# sl_write_if_changed(PATH TEXT): writes TEXT to PATH only when it differs from what is there, so
# that a generated source that did not change rebuilds nothing (used by the build-time scripts
# git_commit.cmake and embed_configs.cmake).
function(sl_write_if_changed path text)
  if(EXISTS "${path}")
    file(READ "${path}" old)
  else()
    set(old "")
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${path}" "${text}")
  endif()
endfunction()
