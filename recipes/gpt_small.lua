-- gpt_small.lua: train a small GPT on bytes of the King James Bible with Muon distributed
-- layer-wise across the ranks (AdamW for embeddings and gains).
--   mpirun -np 2 luajit recipes/gpt_small.lua [--preset tiny|small] [--steps N] ...
--   luajit recipes/gpt_small.lua --help
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = table.concat({ dir .. "/../lua/?.lua", dir .. "/../lua/?/init.lua",
   dir .. "/../build/lua/?.lua", package.path }, ";")

-- before the library is built, one line that says how to build it, not a traceback
local found, lw = pcall(require, "lwopt")
if not found then
   io.stderr:write(tostring(lw), "\n")
   os.exit(1)
end
lw.comm.run(function(...)
   require("lwopt.app.recipe").main({ ... }, nil, arg[0])
end, ...)
