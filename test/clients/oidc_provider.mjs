// oidc_provider.mjs: the certified OpenID Connect provider (panva's
// oidc-provider) with its development interactions, as the browser tests'
// identity provider. It listens on a loopback port of its own choosing and
// prints {"issuer": …} once ready.
//
// OIDC_TEST_CLIENTS    JSON: the client registrations
// OIDC_TEST_ACCOUNTS   a JSON file, read at every sign-in: login → claims
import http from "node:http";
import fs from "node:fs";
import Provider from "oidc-provider";

const clients = JSON.parse(process.env.OIDC_TEST_CLIENTS);
const accountsFile = process.env.OIDC_TEST_ACCOUNTS;

const server = http.createServer();
server.listen(0, "127.0.0.1", () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients,
    claims: { openid: ["sub"], email: ["email"], profile: ["name"], groups: ["groups", "gateway_account"] },
    scopes: ["openid", "profile", "email", "groups"],
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
    cookies: { keys: ["oidc-provider test cookie key"] },
    async findAccount(ctx, id) {
      const accounts = JSON.parse(fs.readFileSync(accountsFile, "utf8"));
      return { accountId: id, async claims() { return { sub: id, ...(accounts[id] || {}) }; } };
    },
  });
  server.on("request", provider.callback());
  console.log(JSON.stringify({ issuer }));
});
