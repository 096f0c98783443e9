-- recipe_docs_spec.lua: the recipe's documentation against the recipe: every flag that
-- `luajit recipes/gpt_small.lua --help` lists has a row in docs/recipes.md's flag table, and no
-- row there or in recipes/README.md names a flag the recipe does not have, so that the two
-- never drift apart.
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")

-- The flags --help lists, in its order.
local function help_flags()
   local out, status = helpers.sh("cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua --help")
   assert.equal(0, status, out)
   local list = {}
   for flag in out:gmatch("\n  %-%-([%w%-]+)") do list[#list + 1] = flag end
   return list
end

-- The flags named in the first cell of a markdown table's rows ("| `--batch B`, `--seq T` |"),
-- as a set, and the lines naming each.
local function table_flags(path)
   local set = {}
   local n = 0
   for line in io.lines(root .. "/" .. path) do
      n = n + 1
      local cell = line:match("^| (.-) | ")
      if cell then
         for flag in cell:gmatch("`%-%-([%w%-]+)") do set[flag] = set[flag] or n end
      end
   end
   return set
end

describe("the recipe's documentation", function()
   it("has a row in docs/recipes.md for every flag of the recipe's --help", function()
      local flags = help_flags()
      assert.is_true(#flags > 40, "--help listed only " .. #flags .. " flags")
      local documented = table_flags("docs/recipes.md")
      local missing = {}
      for _, flag in ipairs(flags) do
         if not documented[flag] then missing[#missing + 1] = "--" .. flag end
      end
      assert.are.same({}, missing, "flags of --help with no row in docs/recipes.md's table: "
         .. table.concat(missing, ", "))
   end)

   it("names no flag the recipe lacks, in docs/recipes.md or recipes/README.md", function()
      local known = {}
      for _, flag in ipairs(help_flags()) do known[flag] = true end
      for _, path in ipairs({ "docs/recipes.md", "recipes/README.md" }) do
         local unknown = {}
         for flag, line in pairs(table_flags(path)) do
            if not known[flag] then
               unknown[#unknown + 1] = ("--%s (line %d)"):format(flag, line)
            end
         end
         table.sort(unknown)
         assert.are.same({}, unknown, path .. " documents flags the recipe does not have: "
            .. table.concat(unknown, ", "))
      end
   end)
end)
