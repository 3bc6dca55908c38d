# Sourced by the scripts: CACHE is kiln's cache folder, by the same rule as
# kiln's util::cache_dir: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
# ~/.cache/kiln.
if [[ -n "${KILN_CACHE_DIR:-}" ]]; then
  CACHE="$KILN_CACHE_DIR"
elif [[ -n "${XDG_CACHE_HOME:-}" ]]; then
  CACHE="$XDG_CACHE_HOME/kiln"
else
  CACHE="$HOME/.cache/kiln"
fi
