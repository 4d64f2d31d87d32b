# Shared by the training scripts: source it after setting ROOT.
#   resume DIR   -> "--resume" if DIR holds checkpoints (an interrupted run), else nothing
#   require FILE... -> exit with a message naming the script that makes a missing input
resume() { [[ -d "$1/checkpoints" ]] && echo --resume || true; }
require() {
    local maker="$1"; shift
    for need in "$@"; do
        [[ -e "$need" ]] || { echo "missing $need: run $maker first" >&2; exit 1; }
    done
}
