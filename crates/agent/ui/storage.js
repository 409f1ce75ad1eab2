// The token the user typed: in this tab's session storage only (gone when the tab
// closes; never in a URL, a cookie or local storage).
const KEY = 'schedstate.token';

export function getToken() {
  return sessionStorage.getItem(KEY);
}

export function setToken(token) {
  sessionStorage.setItem(KEY, token);
}

export function clearToken() {
  sessionStorage.removeItem(KEY);
}
