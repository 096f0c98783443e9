-- json_spec.lua: the JSON encoder, read back by an independent decoder (dkjson) and by lwopt's
-- own parser: floats in their shortest exact form, every double bit for bit.
local json = require("lwopt.json")
local dkjson = require("dkjson")

describe("lw.json.encode", function()
   it("writes objects with sorted keys so equal values give equal text", function()
      assert.equal('{"a":1,"b":[true,false],"c":"x"}', json.encode({ c = "x", a = 1, b = { true, false } }))
   end)

   it("writes integers exactly and other numbers round-trippably", function()
      assert.equal("124373760", json.encode(124373760))
      assert.equal("1099511627777", json.encode(2 ^ 40 + 1))
      assert.equal(0.1, dkjson.decode(json.encode(0.1)))
      assert.equal("null", json.encode(0 / 0))
   end)

   it("writes floats in the shortest of %.15g, %.16g and %.17g that reads back", function()
      assert.equal("9.32", json.encode(9.32))
      assert.equal("0.1", json.encode(0.1))
      assert.equal("0.30000000000000004", json.encode(0.1 + 0.2))
      assert.equal("0.3333333333333333", json.encode(1 / 3))
      assert.equal("-2.5", json.encode(-2.5))
      assert.equal("1e+300", json.encode(1e300))
      assert.equal("-0", json.encode(-0.0))
      assert.equal("0", json.encode(0))
      assert.equal('{"loss":5.54518859697568}', json.encode({ loss = 5.54518859697568 }))
   end)

   -- Every double must come back bit for bit: the log's losses are compared exactly (train
   -- consistency across rank counts, resume). Read back three ways: Lua's tonumber, lwopt's
   -- own parser (src/core/json.c) and dkjson.
   describe("round trip", function()
      local ffi = require("ffi")
      local cell = ffi.new("union { double d; uint64_t u; }")
      local function bits(x)
         cell.d = x
         return cell.u
      end
      local function same_double(x, text)
         local back = { tonumber(text), json.decode("[" .. text .. "]")[1],
            dkjson.decode("[" .. text .. "]")[1] }
         for _, y in ipairs(back) do
            if bits(y) ~= bits(x) then return false end
         end
         return true
      end
      local function check(x)
         local text = json.encode(x)
         if not same_double(x, text) then
            error(("%.17g (bits %s) was written %s"):format(x, tostring(bits(x)), text))
         end
         return text
      end

      it("brings back random doubles of every exponent, in at most 17 digits", function()
         local state = 12345
         local function next_u32() -- a 32-bit xorshift: seeded, the same every run
            state = bit.bxor(state, bit.lshift(state, 13))
            state = bit.bxor(state, bit.rshift(state, 17))
            state = bit.bxor(state, bit.lshift(state, 5))
            return bit.band(state, 0xffffffff) % 2 ^ 32
         end
         for _ = 1, 20000 do
            cell.u = ffi.cast("uint64_t", next_u32()) * 2 ^ 32 + next_u32()
            local x = cell.d
            if x == x and x ~= math.huge and x ~= -math.huge then
               local digits = check(x):gsub("e.*$", ""):gsub("%D", ""):gsub("^0+", "")
               assert.is_true(#digits <= 17, digits)
            end
         end
      end)

      it("brings back the numbers training writes: losses, rates, times, fractions", function()
         local state = 7
         for _ = 1, 20000 do
            state = (state * 1103515245 + 12345) % 2147483648
            local u = state / 2147483648
            for _, x in ipairs({ u, 10 * u, 1e-3 * u, 1e5 * u, 1.7e9 + u, -u, u / 3,
               math.log(1 + u), math.exp(-50 * u) }) do
               check(x)
            end
         end
      end)

      it("brings back subnormals, the extremes, negative zero and integers", function()
         local values = { 4.9406564584124654e-324, 2 * 4.9406564584124654e-324,
            2.2250738585072009e-308, 2.2250738585072014e-308, 1.7976931348623157e308,
            -1.7976931348623157e308, 1e-320, 123e-310, -0.0, 0, 1, -1, 2 ^ 53 - 1, -(2 ^ 53 - 1),
            2 ^ 53, 2 ^ 53 + 2, 2 ^ 63, 2 ^ 64, 1e21, 1e22, 1e23, 5e-324, 0.1, 0.2, 0.3, 1 / 3,
            9.32, 5e-5, 123456789012345678 }
         for i = 0, 52 do
            values[#values + 1] = 2 ^ -1074 * 2 ^ i -- each subnormal bit
            values[#values + 1] = 2 ^ i + 0.5
         end
         for _, x in ipairs(values) do check(x) end
         assert.equal("-0", check(-0.0))
         assert.equal("9007199254740991", check(2 ^ 53 - 1))
         assert.equal("-42", check(-42))
         assert.equal("4.94065645841247e-324", check(4.9406564584124654e-324))
      end)
   end)

   it("escapes strings", function()
      local s = 'quote " backslash \\ newline \n tab \t bell \7'
      assert.equal(s, dkjson.decode(json.encode(s)))
   end)

   it("tells empty objects from empty arrays when marked, and writes null", function()
      assert.equal("[]", json.encode({}))
      assert.equal("{}", json.encode(json.object()))
      assert.equal('{"x":null}', json.encode({ x = json.null }))
   end)

   it("pretty-prints with an indent", function()
      assert.equal('{\n  "a": [\n    1\n  ]\n}', json.encode({ a = { 1 } }, "  "))
   end)

   it("refuses values JSON cannot hold", function()
      assert.has_error(function() json.encode({ [true] = 1 }) end,
         "json.encode: object key true is not a string")
      assert.has_error(function() json.encode(print) end, "json.encode: cannot encode a function")
   end)
end)
