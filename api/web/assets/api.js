// The JSON API of the service that serves this page, read with an optional bearer token.
// The token lives in this tab's sessionStorage only (gone when the tab closes) and is sent to
// this origin only: requests are same-origin, relative to the page (/ui/ -> the API root).

const TOKEN_KEY = "kernevo.token";
// The API root: the folder above the page's (/ui/ -> /), so a service behind a path prefix works.
const ROOT = new URL("..", document.baseURI);

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  const trimmed = value.trim();
  if (trimmed) sessionStorage.setItem(TOKEN_KEY, trimmed);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// An answer other than 2xx: its HTTP status and the API's one-line detail.
export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }

  // What the page says about it: a 401/403 names the token, anything else the detail.
  explain() {
    if (this.status === 401) {
      return token()
        ? `the token was refused (${this.detail}); paste a valid read token above`
        : "this needs a read token: paste one above (kernevo token create --scope read)";
    }
    if (this.status === 403) return `the token's scope is too narrow: ${this.detail}`;
    return this.message;
  }
}

function detailOf(body, fallback) {
  if (body && typeof body.detail === "string") return body.detail;
  if (body && Array.isArray(body.detail)) {
    return body.detail.map((issue) => (issue && issue.msg) || "invalid").join("; ");
  }
  return fallback;
}

// GET path (relative to the API root, e.g. "v1/jobs") with query params; the parsed JSON, or
// an ApiError (status 0 when the request never got an answer).
export async function getJson(path, params = {}) {
  const url = new URL(path, ROOT);
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") {
      url.searchParams.set(name, String(value));
    }
  }
  const headers = { Accept: "application/json" };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  let response;
  try {
    response = await fetch(url, { headers, cache: "no-store", credentials: "omit" });
  } catch (error) {
    throw new ApiError(0, `no answer from the service (${error.message})`);
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, detailOf(body, response.statusText));
  return body;
}
