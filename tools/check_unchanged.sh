#!/usr/bin/env bash
# Usage: tools/check_unchanged.sh PATH -- COMMAND [ARGS...]
#
# Runs COMMAND (e.g. nbdev_export, nbdev_clean) and fails if it changed anything under PATH:
#   1. always: PATH is compared with a snapshot taken just before COMMAND ran, so a developer
#      can run this on a dirty work tree and it only fails if COMMAND had something to do;
#   2. in CI (CI=true/1, or SYNC_GIT_CHECK=1): `git status --porcelain PATH` must also be empty,
#      i.e. nothing modified or untracked compared with the commit being tested.
# COMMAND's changes are left in place, so after a failure the fix is to review and commit them.
set -euo pipefail

path=${1:?usage: check_unchanged.sh PATH -- COMMAND [ARGS...]}
shift
[[ ${1:-} == -- ]] && shift
(( $# )) || { echo "check_unchanged.sh: no command given" >&2; exit 2; }

snap=$(mktemp -d)
trap 'rm -rf "$snap"' EXIT
if [[ -e $path ]]; then cp -a "$path" "$snap/before"; else mkdir "$snap/before"; fi

echo "+ $*"
"$@"

after=$path
[[ -e $path ]] || { after="$snap/empty"; mkdir "$after"; }
excl=(-x __pycache__ -x '*.pyc' -x .ipynb_checkpoints -x .last_checked)
if ! diff -rq "${excl[@]}" "$snap/before" "$after" > "$snap/list" 2>&1; then
    echo "FAIL: '$*' changed files under $path/ -- notebooks and $path/ are out of sync:" >&2
    sed -e "s#$snap/before#$path#g" -e 's/^/    /' "$snap/list" >&2
    { diff -ru "${excl[@]}" "$snap/before" "$after" || true; } | sed "s#$snap/before#$path#g" | head -n 60 >&2 || true
    echo "The changes were left in the work tree: review them and commit." >&2
    exit 1
fi

git_check=${SYNC_GIT_CHECK:-}
if [[ -z $git_check ]]; then
    case ${CI:-} in true|TRUE|True|1|yes) git_check=1 ;; *) git_check=0 ;; esac
fi
if [[ $git_check == 1 ]]; then
    status=$(git status --porcelain --untracked-files=all -- "$path")
    if [[ -n $status ]]; then
        echo "FAIL: $path/ differs from the commit (modified or untracked files):" >&2
        echo "$status" | sed 's/^/    /' >&2
        exit 1
    fi
fi
echo "ok: $path/ unchanged by '$1'"
