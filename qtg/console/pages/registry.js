// The page registry: adding a page to the console is one module exporting
//   { path: "things/:id", title, nav: bool, role: "viewer" | "operator" | "admin",
//     render(main, ctx) → optional cleanup function }
// and one line here. Order is the navigation's order. ctx: {params, query
// (URLSearchParams), navigate(path, query), session, refresh, main}.

import addressbook from "./addressbook.js";
import audit from "./audit.js";
import balances from "./balances.js";
import drift from "./drift.js";
import movement from "./movement.js";
import movements from "./movements.js";
import notifications from "./notifications.js";
import policies from "./policies.js";
import proposals from "./proposals.js";
import providers from "./providers.js";
import signin from "./signin.js";
import templates from "./templates.js";
import transfers from "./transfers.js";
import workers from "./workers.js";

export const PAGES = [
  movements,
  movement,
  templates,
  proposals,
  policies,
  addressbook,
  workers,
  providers,
  audit,
  transfers,
  balances,
  drift,
  notifications,
  signin,
];
