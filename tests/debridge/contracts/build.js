// Rebuilds DlnLocal.json (ABI + bytecode of TestToken, DlnSource, DlnDestination)
// from DlnLocal.sol. Not run by CI; the output is committed. Usage:
//   mkdir -p /tmp/dlnsolc && cd /tmp/dlnsolc && npm init -y && npm install solc@0.8.24
//   NODE_PATH=/tmp/dlnsolc/node_modules node tests/cctp/contracts/build.js
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const here = __dirname;
const input = {
  language: "Solidity",
  sources: { "DlnLocal.sol": { content: fs.readFileSync(path.join(here, "DlnLocal.sol"), "utf8") } },
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
for (const name of ["TestToken", "DlnSource", "DlnDestination"]) {
  const c = out.contracts["DlnLocal.sol"][name];
  result[name] = { abi: c.abi, bytecode: "0x" + c.evm.bytecode.object };
}
fs.writeFileSync(path.join(here, "DlnLocal.json"), JSON.stringify(result) + "\n");
console.log("wrote DlnLocal.json");
