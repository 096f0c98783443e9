-- with_faults.lua: runs a recipe as `luajit RECIPE [args]` would, with the test-only faults the
-- environment asks for installed in the library's hook points (tests/lua/faults.lua):
-- LWOPT_KILL_AFTER_STEP=N ends the job after step N, LWOPT_CKPT_CRASH=optim|model|manifest|
-- rename ends it at that point of a checkpoint save.
-- Usage: [mpirun -np N -x LWOPT_...] luajit tests/lua/with_faults.lua RECIPE [args]
local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = table.concat({ here .. "/../../lua/?.lua", here .. "/../../lua/?/init.lua",
   here .. "/../../build/lua/?.lua", package.path }, ";")

local script = arg[1]
if script == nil then
   io.stderr:write("usage: [mpirun -np N] luajit tests/lua/with_faults.lua RECIPE [args]\n")
   os.exit(2)
end
local chunk, err = loadfile(script)
if chunk == nil then
   io.stderr:write("with_faults: ", err, "\n")
   os.exit(2)
end
dofile(here .. "/faults.lua").from_env()
-- the recipe sees its own path as arg[0] and the rest as its arguments
local script_arg = { [0] = script }
for i = 2, #arg do script_arg[i - 1] = arg[i] end
_G.arg = script_arg
return chunk(unpack(script_arg))
