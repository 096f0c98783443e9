-- flags_spec.lua: the command-line flag parser shared by bin/lwopt and recipes.
local flags = require("lwopt.flags")

local list = {
   { "dp", "int", 1, "ranks" },
   { "bucket-size", "size", nil, "elements" },
   { "lr", "number", 0.1, "learning rate" },
   { "algorithm", { "cost", "lpt" }, "cost", "layout" },
   { "json", "bool", false, "JSON" },
   { "name", "string", nil, "a name" },
}

describe("lw.flags.parse", function()
   it("fills defaults and reads both --flag value and --flag=value", function()
      local v, positional = flags.parse({ "--dp", "4", "--bucket-size=40M", "file", "--json" }, list)
      assert.same({ dp = 4, bucket_size = 40e6, lr = 0.1, algorithm = "cost", json = true },
         v)
      assert.same({ "file" }, positional)
   end)

   it("collects a flag given again into a list when it is marked many", function()
      local many = { { "file", "string", nil, "a file", many = true },
                     { "dp", "int", 1, "ranks" } }
      assert.same({ "a.lua", "b.lua" }, flags.parse({ "--file", "a.lua", "--dp", "2",
         "--file=b.lua" }, many).file)
      assert.is_nil(flags.parse({ "--dp", "2" }, many).file)
      -- a flag without it keeps the last value
      assert.equal(3, flags.parse({ "--dp", "2", "--dp", "3" }, many).dp)
   end)

   it("converts sizes with K, M and G suffixes", function()
      assert.equal(2000, flags.parse({ "--bucket-size", "2K" }, list).bucket_size)
      assert.equal(3e9, flags.parse({ "--bucket-size", "3G" }, list).bucket_size)
   end)

   it("names every mistake", function()
      local cases = {
         { { "--nope" }, "unknown flag --nope" },
         { { "--dp" }, "--dp needs a value" },
         { { "--dp", "x" }, "--dp expects an integer, got 'x'" },
         { { "--dp", "4M" }, "--dp expects an integer, got '4M'" },
         { { "--bucket-size", "4T" }, "--bucket-size expects an element count such as 40M, got '4T'" },
         { { "--lr", "fast" }, "--lr expects a number, got 'fast'" },
         { { "--algorithm", "greedy" }, "--algorithm must be one of cost|lpt, got 'greedy'" },
         { { "--json=yes" }, "--json takes no value" },
      }
      for _, c in ipairs(cases) do
         local v, err = flags.parse(c[1], list)
         assert.is_nil(v)
         assert.equal(c[2], err)
      end
   end)

   it("bounds numbers, and keeps integers exact", function()
      local bounded = { { "steps", "int", nil, "", min = 1, max = 1e9 },
         { "lr", "number", nil, "", min = 0 }, { "n", "int", nil, "" } }
      local function err(argv) return select(2, flags.parse(argv, bounded)) end
      assert.equal("--steps must be between 1 and 1000000000, got 0", err({ "--steps", "0" }))
      assert.equal("--steps must be between 1 and 1000000000, got 99999999999",
         err({ "--steps", "99999999999" }))
      assert.equal("--lr must be >= 0, got -1", err({ "--lr", "-1" }))
      assert.equal("--lr expects a number, got 'inf'", err({ "--lr", "inf" }))
      assert.equal("--n is out of range, got 100000000000000000000",
         err({ "--n", "100000000000000000000" }))
      assert.equal(1e9, flags.parse({ "--steps", "1000000000" }, bounded).steps)
   end)

   it("bounds a number from below excluding the bound, with one message for every value", function()
      local positive = { { "lr", "number", nil, "", above = 0 } }
      local function err(argv) return select(2, flags.parse(argv, positive)) end
      assert.equal("--lr must be > 0, got 0", err({ "--lr", "0" }))
      assert.equal("--lr must be > 0, got -1", err({ "--lr", "-1" }))
      assert.equal(1e-9, flags.parse({ "--lr", "1e-9" }, positive).lr)
   end)

   it("suggests the flag a mistyped one is closest to", function()
      local near = { { "steps", "int" }, { "ckpt-every", "int" }, { "seed", "int" } }
      assert.equal("unknown flag --step (did you mean --steps?)",
         select(2, flags.parse({ "--step", "1" }, near)))
      assert.equal("unknown flag --ckpt-evry (did you mean --ckpt-every?)",
         select(2, flags.parse({ "--ckpt-evry", "1" }, near)))
      assert.equal("unknown flag --ckpt (did you mean --ckpt-every?)",
         select(2, flags.parse({ "--ckpt", "1" }, near)))
      assert.equal("unknown flag --banana", select(2, flags.parse({ "--banana" }, near)))
   end)

   it("gives a flag with a bare value that value when it is given alone", function()
      local bare = { { "model-step", { "a", "b" }, nil, "", bare = "a" }, { "json", "bool", false } }
      assert.equal("a", flags.parse({ "--model-step" }, bare).model_step)
      assert.equal("a", flags.parse({ "--model-step", "--json" }, bare).model_step)
      assert.equal("b", flags.parse({ "--model-step", "b" }, bare).model_step)
      assert.equal("b", flags.parse({ "--model-step=b" }, bare).model_step)
      assert.is_nil(flags.parse({ "--json" }, bare).model_step)
      assert.equal("--model-step must be one of a|b, got 'c'",
         select(2, flags.parse({ "--model-step", "c" }, bare)))
      assert.matches("%-%-model%-step %[{a|b}%]", flags.usage(bare))
   end)

   it("prints a usage line per flag with its default", function()
      local text = flags.usage(list)
      assert.matches("%-%-dp INT%s+ranks %(default 1%)", text)
      assert.matches("%-%-algorithm {cost|lpt}", text)
   end)
end)
