# Bash runfiles library of @bazel_tools//tools/bash/runfiles, for rbs's runfiles trees.
#
# Source it with Bazel's usual snippet, then call `rlocation WORKSPACE/path` to get
# the absolute path of a runfile. rbs lays runfiles out as folders of symlinks
# (<program>.runfiles/<workspace>/...), so the tree is found through $RUNFILES_DIR
# or next to the program as $0.runfiles; a manifest file is read when one is named.

if [[ -z "${RUNFILES_DIR:-}" && -z "${RUNFILES_MANIFEST_FILE:-}" ]]; then
  if [[ -d "$0.runfiles" ]]; then
    export RUNFILES_DIR="$(cd "$0.runfiles" && pwd)"
  elif [[ -f "$0.runfiles_manifest" ]]; then
    export RUNFILES_MANIFEST_FILE="$0.runfiles_manifest"
  fi
fi

function rlocation() {
  if [[ "$1" == /* ]]; then
    echo "$1"
    return 0
  fi
  if [[ -n "${RUNFILES_DIR:-}" && -e "${RUNFILES_DIR}/$1" ]]; then
    echo "${RUNFILES_DIR}/$1"
    return 0
  fi
  if [[ -n "${RUNFILES_MANIFEST_FILE:-}" && -f "${RUNFILES_MANIFEST_FILE}" ]]; then
    local found
    found="$(grep -m1 "^$1 " "${RUNFILES_MANIFEST_FILE}" | cut -d ' ' -f 2-)"
    if [[ -n "$found" ]]; then
      echo "$found"
      return 0
    fi
  fi
  if [[ "${RUNFILES_LIB_DEBUG:-}" == 1 ]]; then
    echo >&2 "INFO[runfiles.bash]: rlocation($1): not found"
  fi
  return 1
}
export -f rlocation

function runfiles_export_envvars() {
  if [[ -n "${RUNFILES_DIR:-}" ]]; then
    export RUNFILES_DIR JAVA_RUNFILES="${RUNFILES_DIR}"
  fi
  if [[ -n "${RUNFILES_MANIFEST_FILE:-}" ]]; then
    export RUNFILES_MANIFEST_FILE
  fi
}
export -f runfiles_export_envvars
