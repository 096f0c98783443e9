-- own_model.lua: a recipe that trains a model of its own: the Mistral of the models file
-- models/mistral.lua (--arch mistral by default), with every flag of gpt_small.lua. The same
-- file makes its checkpoints known to the commands that open them:
--   luajit recipes/own_model.lua --preset tiny --ckpt-dir runs/mistral
--   bin/lwopt sample runs/mistral --models recipes/models/mistral.lua
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
   lw.models.load(dir .. "/models/mistral.lua")
   -- the flags given come after, so that --arch names another model if it is given
   require("lwopt.app.recipe").main({ "--arch", "mistral", ... }, nil, arg[0])
end, ...)
