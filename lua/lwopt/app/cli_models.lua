-- cli_models.lua: --models FILE (repeatable) and LWOPT_MODELS (paths separated by ':'): the
-- models files (lw.models.load) a command loads before it reads its other flags, so that a
-- model a user registered is an --arch choice and a checkpoint of it can be opened. Only the
-- files named here run: a checkpoint's record of its models file is a hint in an error message.
local models = require("lwopt.models")

local cli_models = {}

cli_models.ENV = "LWOPT_MODELS"

-- The flag, for the flag lists of the commands that take it.
cli_models.FLAG = { "models", "string", nil, "a models file: Lua that returns model entries "
   .. "(lw.models.derive(...)) to register, as the recipe that trained them loads it; "
   .. "repeatable; also " .. cli_models.ENV .. "=a.lua:b.lua", many = true }

-- The models files of the environment's LWOPT_MODELS (getenv: default os.getenv), then of
-- argv's --models FILE and --models=FILE, in order.
function cli_models.paths(argv, getenv)
   local out = {}
   for path in ((getenv or os.getenv)(cli_models.ENV) or ""):gmatch("[^:]+") do
      out[#out + 1] = path
   end
   local i = 1
   while i <= #argv do
      local a = argv[i]
      local inline = a:match("^%-%-models=(.*)$")
      if inline then
         out[#out + 1] = inline
      elseif a == "--models" and argv[i + 1] then
         out[#out + 1] = argv[i + 1]
         i = i + 1
      end
      i = i + 1
   end
   return out
end

-- Loads the models files cli_models.paths names; true, or nil and the message (one line: the
-- file and what is wrong with it; from LWOPT_MODELS, said so).
function cli_models.load(argv, getenv)
   local from_env = {}
   for path in ((getenv or os.getenv)(cli_models.ENV) or ""):gmatch("[^:]+") do
      from_env[path] = true
   end
   for _, path in ipairs(cli_models.paths(argv, getenv)) do
      local ok, why = pcall(models.load, path)
      if not ok then
         why = tostring(why):gsub("^lw%.models%.load: ", "")
         return nil, why .. (from_env[path] and (" (from " .. cli_models.ENV .. ")") or "")
      end
   end
   return true
end

return cli_models
