// Sign in with an API token (from `qtg token create`). The token is checked
// with GET /v3/whoami, then kept in this tab's sessionStorage only.

import { api } from "../api.js";
import { errorBox, h, mount } from "../dom.js";

export default {
  path: "signin",
  title: "Sign in",
  nav: false,
  public: true,
  render(main, { refresh, session }) {
    const input = h("input#token", {
      type: "password", name: "token", autocomplete: "off", spellcheck: "false",
      placeholder: "qtg_…", required: true, size: 52,
    });
    const out = h("div.out");
    const form = h("form.signin", {
      onsubmit: async (e) => {
        e.preventDefault();
        const token = input.value.trim();
        const r = await api("GET", "/v3/whoami", { token });
        if (!r.ok) {
          mount(out, errorBox(r));
          return;
        }
        session.set(token);
        session.principal = r.body;
        input.value = "";
        const next = session.next;
        session.next = null;
        const target = next && !next.startsWith("signin") ? `#/${next}` : "#/movements";
        // The sign-in page is drawn under the asked-for URL: same hash, no hashchange.
        if (window.location.hash === target) refresh();
        else window.location.hash = target;
      },
    },
    h("h1", "Sign in"),
    h("p.muted", "Paste an API token (", h("code", "qtg token create --name you --role operator"),
      "). It stays in this tab's session storage and is sent only to this server."),
    h("label.field", h("span", "Token"), input),
    h("button#signin", { type: "submit" }, "Sign in"),
    out);
    mount(main, form);
    input.focus();
  },
};
