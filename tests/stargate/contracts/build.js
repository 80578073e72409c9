// Rebuilds StargateLocal.json (ABI + bytecode of TestUSDT, EndpointV2Local, StargatePoolLocal)
// from StargateLocal.sol. Not run by CI; the output is committed. Usage:
//   mkdir -p /tmp/sgsolc && cd /tmp/sgsolc && npm init -y && npm install solc@0.8.24
//   NODE_PATH=/tmp/sgsolc/node_modules node tests/stargate/contracts/build.js
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const here = __dirname;
const input = {
  language: "Solidity",
  sources: { "StargateLocal.sol": { content: fs.readFileSync(path.join(here, "StargateLocal.sol"), "utf8") } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    viaIR: false,
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
const out = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (out.errors || []).filter((e) => e.severity === "error");
if (errors.length) { console.error(errors.map((e) => e.formattedMessage).join("\n")); process.exit(1); }
const result = {};
for (const name of ["TestUSDT", "EndpointV2Local", "StargatePoolLocal"]) {
  const c = out.contracts["StargateLocal.sol"][name];
  result[name] = { abi: c.abi, bytecode: "0x" + c.evm.bytecode.object };
}
fs.writeFileSync(path.join(here, "StargateLocal.json"), JSON.stringify(result) + "\n");
console.log("wrote StargateLocal.json");
