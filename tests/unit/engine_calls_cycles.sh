#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# unit.engine_calls_cycles: scripts/engine-calls finds call cycles between
# files of src/ however long, in src/engine as anywhere, through public
# (TPX_API) functions, functions that return a struct, the inline functions
# of headers and functions' addresses too, and fails --strict on each, on a public
# function below the engine's top layer, and on a write of the engine's
# settings (e->cfg) outside engine.c, on calls between files of one row, on a
# one-sided kind or field named below rma.c, on a field of the engine written
# outside its owner, on a file reaching inside another file's part of the
# engine (e->pack->dev outside pack.c), on a header included from a lower
# row than its own, and
# on a picture of the layers (--design) that draws them otherwise. Runs it
# on small trees made here.
#
#   engine_calls_cycles.sh SOURCE_DIR
set -euo pipefail
script="$1/scripts/engine-calls"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A tree: src/engine with one file of the bottom layer, and `extra` files.
tree() {
    rm -rf "$tmp/src"
    mkdir -p "$tmp/src/engine" "$tmp/src/plugin" "$tmp/src/common"
    printf 'int tpx__wire_x(void)\n{\n    return 0;\n}\n' > "$tmp/src/engine/wire.c"
}
# file caller-of: "f.c" defines tpx__f() calling tpx__g()
def() { printf 'int tpx__%s(void)\n{\n    return tpx__%s();\n}\n' "$2" "$3" > "$tmp/src/$1"; }
run() { python3 "$script" --strict --src "$tmp/src" "$tmp/src/engine" > "$tmp/out" 2>&1; }
fail() { echo "FAIL: $*"; cat "$tmp/out"; exit 1; }

# three files of src/ in a circle across folders: a cycle, --strict fails
tree
def plugin/a.c a b
def plugin/b.c b c
def common/c.c c a
if run; then fail "a three-file cycle passed --strict"; fi
grep -q "3 files: common/c.c plugin/a.c plugin/b.c" "$tmp/out" || fail "the cycle is not named"
grep -q "plugin/b.c -> common/c.c  tpx__c" "$tmp/out" || fail "the cycle's calls are not listed"

# the same calls in a line: no cycle
tree
def plugin/a.c a b
def plugin/b.c b c
printf 'int tpx__c(void)\n{\n    return 0;\n}\n' > "$tmp/src/common/c.c"
run || fail "a tree without cycles failed"
grep -q "^  none$" "$tmp/out" || fail "no cycle is not said"

# a cycle inside src/engine fails as well
tree
def engine/wire.c wire_x ident_y
def engine/ident.c ident_y wire_x
if run; then fail "a cycle inside src/engine passed --strict"; fi
grep -q "2 files: engine/ident.c engine/wire.c" "$tmp/out" || fail "the engine's cycle is not named"

# a public function is no exception: its calls close a cycle like any other
tree
def plugin/a.c a b
printf 'TPX_API int tpx_b(void)\n{\n    return tpx__a();\n}\nint tpx__b(void)\n{\n    return tpx_b();\n}\n' \
    > "$tmp/src/common/b.c"
if run; then fail "a cycle through a TPX_API function passed --strict"; fi
grep -q "common/b.c -> plugin/a.c  tpx__a" "$tmp/out" || fail "the public function's call is not listed"

# a function that returns a struct is attributed to its file like any other
tree
def plugin/a.c a b
printf 'struct s *tpx__b(void)\n{\n    tpx__a();\n    return 0;\n}\n' > "$tmp/src/common/b.c"
if run; then fail "a cycle through a function returning a struct passed --strict"; fi
grep -q "2 files: common/b.c plugin/a.c" "$tmp/out" || fail "the struct function's cycle is not named"

# a static inline function of a header counts as the calls it makes
tree
def plugin/a.c a h
printf 'static inline int tpx__h(void)\n{\n    return tpx__b();\n}\n' > "$tmp/src/common/h.h"
def common/b.c b a
if run; then fail "a cycle through a header's inline function passed --strict"; fi
grep -q "plugin/a.c -> common/b.c  tpx__b" "$tmp/out" || fail "the inline function's call is not listed"

# a function's address stored in a table is a call made later
tree
def plugin/a.c a b
printf 'int tpx__a(void);\nint (*const tpx__b_tab[])(void) = {tpx__a};\nint tpx__b(void)\n{\n    return 0;\n}\n' \
    > "$tmp/src/common/b.c"
if run; then fail "a cycle through a function's address passed --strict"; fi
grep -q "common/b.c -> plugin/a.c  tpx__a" "$tmp/out" || fail "the address taken is not listed"

# inside src/engine, a call up a layer through a header's inline function fails
tree
printf 'static inline int tpx__up(void)\n{\n    return tpx__engine_x();\n}\n' > "$tmp/src/engine/up.h"
printf 'int tpx__wire_y(void)\n{\n    return tpx__up();\n}\n' >> "$tmp/src/engine/wire.c"
printf 'int tpx__engine_x(void)\n{\n    return 0;\n}\n' > "$tmp/src/engine/engine.c"
if run; then fail "a call up a layer through an inline function passed --strict"; fi
grep -q "wire.c    -> engine.c  tpx__engine_x" "$tmp/out" || fail "the inline call up is not named"

# files of one row of src/engine do not call each other, even one way
tree
printf 'int tpx__ident_z(void)\n{\n    return tpx__wire_x();\n}\n' > "$tmp/src/engine/ident.c"
if run; then fail "a call between files of one row passed --strict"; fi
grep -q "ident.c   -> wire.c    tpx__wire_x" "$tmp/out" || fail "the call inside a row is not named"

# the design document draws the layers as the checker has them
tree
printf 'int tpx__engine_x(void)\n{\n    return tpx__wire_x();\n}\n' > "$tmp/src/engine/engine.c"
printf '# d\n### Layers of the engine\n\n```\n wire.c   formats\n engine.c the engine\n```\n' \
    > "$tmp/design.md"
if python3 "$script" --strict --src "$tmp/src" --design "$tmp/design.md" "$tmp/src/engine" \
    > "$tmp/out" 2>&1; then fail "a picture with the layers upside down passed --strict"; fi
grep -q "wire.c is drawn above engine.c" "$tmp/out" || fail "the picture's wrong order is not named"
printf '# d\n### Layers of the engine\n\n```\n engine.c the engine\n  wire.c formats\n```\n' \
    > "$tmp/design.md"
python3 "$script" --strict --src "$tmp/src" --design "$tmp/design.md" "$tmp/src/engine" \
    > "$tmp/out" 2>&1 || fail "a picture that matches failed --strict"
printf '# d\n### Layers of the engine\n\n```\n engine.c the engine\n```\n' > "$tmp/design.md"
if python3 "$script" --strict --src "$tmp/src" --design "$tmp/design.md" "$tmp/src/engine" \
    > "$tmp/out" 2>&1; then fail "a picture without wire.c passed --strict"; fi
grep -q "wire.c is not drawn" "$tmp/out" || fail "the file missing from the picture is not named"

# a file below rma.c that names a one-sided kind or field fails
tree
printf 'int tpx__wire_k(struct tpx_xfer *x)\n{\n    return x->kind == XK_READ;\n}\n' \
    >> "$tmp/src/engine/wire.c"
if run; then fail "a one-sided kind named in wire.c passed --strict"; fi
grep -q "wire.c:7: return x->kind == XK_READ;" "$tmp/out" || fail "the one-sided name is not listed"
tree
printf 'void tpx__wire_n(struct tpx_xfer *x)\n{\n    free(x->rma.notif);\n}\n' >> "$tmp/src/engine/wire.c"
if run; then fail "a one-sided field named in wire.c passed --strict"; fi
tree
printf 'int tpx__rma_k(struct tpx_xfer *x)\n{\n    return x->kind == XK_READ && x->req.n;\n}\n' \
    > "$tmp/src/engine/rma.c"
run || fail "rma.c naming its own kinds failed --strict"

# a field of struct tpx_engine is written by its owner (and engine.c) only
tree
printf 'struct tpx_engine {\n    int lock;\n    void *regions; /* mem.c */\n};\n' > "$tmp/src/engine/engine.h"
printf 'void tpx__region_x(struct tpx_engine *e)\n{\n    e->regions = 0;\n}\n' > "$tmp/src/engine/mem.c"
run || fail "a write of e->regions in mem.c failed --strict"
printf 'void tpx__wire_r(struct tpx_engine *e)\n{\n    e->regions = 0;\n}\n' >> "$tmp/src/engine/wire.c"
if run; then fail "a write of e->regions in wire.c passed --strict"; fi
grep -q "wire.c:7: e->regions = 0;" "$tmp/out" || fail "the write of another file's field is not named"
tree
printf 'struct tpx_engine {\n    int zork;\n};\n' > "$tmp/src/engine/engine.h"
if run; then fail "a field no one owns passed --strict"; fi
grep -q "zork: a field of struct tpx_engine that FIELD_WRITERS does not list" "$tmp/out" ||
    fail "the field without owner is not named"

# a part of the engine owned by one file is reached inside by that file only
tree
printf 'struct tpx_pack_state {\n    int dev;\n};\nint tpx__pack_d(struct tpx_engine *e)\n{\n    return e->pack->dev;\n}\n' \
    > "$tmp/src/engine/pack.c"
run || fail "pack.c reaching inside its own e->pack failed --strict"
printf 'int tpx__wire_d(struct tpx_engine *e)\n{\n    return e->pack->dev;\n}\n' >> "$tmp/src/engine/wire.c"
if run; then fail "a read inside e->pack in wire.c passed --strict"; fi
grep -q "wire.c:7: return e->pack->dev;" "$tmp/out" || fail "the read inside another file's part is not named"
tree
printf 'struct tpx_pack_state {\n    int dev;\n};\n' > "$tmp/src/engine/pack.h"
if run; then fail "the type of pack.c's part defined in a header passed --strict"; fi
grep -q "pack.h:1: struct tpx_pack_state {" "$tmp/out" || fail "the type defined outside its owner is not named"
tree
printf 'struct tpx_engine {\n    tpx_zork_state_t *zork;\n};\n' > "$tmp/src/engine/engine.h"
if run; then fail "a part of the engine no file owns passed --strict"; fi
grep -q "zork: a part of struct tpx_engine (tpx_zork_state_t) that STATE_OWNERS does not list" \
    "$tmp/out" || fail "the part without owner is not named"

# a file includes headers of its own row or below: an upward include fails
tree
printf '#include "engine.h"\n#include "ident.h"\n' >> "$tmp/src/engine/wire.c"
: > "$tmp/src/engine/engine.h"
: > "$tmp/src/engine/ident.h"
run || fail "wire.c including headers of the bottom row failed --strict"
printf '#include "peer.h"\n' >> "$tmp/src/engine/wire.c"
: > "$tmp/src/engine/peer.h"
if run; then fail "wire.c including peer.h passed --strict"; fi
grep -q 'wire.c:7: #include "peer.h"' "$tmp/out" || fail "the upward include is not named"
tree
: > "$tmp/src/engine/zork.h"
if run; then fail "a header in no row passed --strict"; fi
grep -q "zork.h: a header of src/engine that HEADER_ROW does not list" "$tmp/out" ||
    fail "the header in no row is not named"

# a public function below the top layer of src/engine fails too
tree
printf 'TPX_API int tpx_w(void)\n{\n    return 0;\n}\n' >> "$tmp/src/engine/wire.c"
if run; then fail "a public function in wire.c passed --strict"; fi
grep -q "not allowed (move them to an api file of the top layer): wire.c" "$tmp/out" ||
    fail "the public function below the top is not named"
# the settings (e->cfg) are written by engine.c only: a write elsewhere fails
tree
printf 'void tpx__wire_set(struct tpx_engine *e)\n{\n    e->cfg.window = 4;\n}\n' \
    >> "$tmp/src/engine/wire.c"
if run; then fail "a write of e->cfg in wire.c passed --strict"; fi
grep -q "wire.c:7: e->cfg.window = 4;" "$tmp/out" || fail "the write of e->cfg is not named"
tree
printf 'int tpx__wire_get(const struct tpx_engine *e)\n{\n    return e && e->cfg.window == 4;\n}\n' \
    >> "$tmp/src/engine/wire.c"
run || fail "a read of e->cfg failed --strict"
printf 'void tpx__engine_set(struct tpx_engine *e)\n{\n    e->cfg.window = 4;\n}\n' \
    > "$tmp/src/engine/engine.c"
run || fail "a write of e->cfg in engine.c failed --strict"
echo "PASS"
